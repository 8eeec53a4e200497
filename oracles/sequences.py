"""Sequence analysis for end-to-end sweeps: how many different completions one prompt produced.

Pure Python (no torch, no pytest) so the plugin, the matrix and the demo can use it anywhere.
A completion is a sequence of token ids; two completions are equal only when every id is equal
(the token-level bitwise contract). Where they differ, the token index of the first difference
and the reference's top-1/top-2 logprob margin at that index tell *why*: a flip at a near-tie is
what batch-variant numerics produce; a confident flip points at a real bug (wrong cache, wrong
request routing).
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .classes import ClassRanges, class_ranges, equivalence_classes

TIE = "tie"
NEAR_TIE = "near-tie"
CONFIDENT = "confident"
MARGIN_CLASSES = (TIE, NEAR_TIE, CONFIDENT)

# Declared thresholds (natural-log units). A margin of exactly 0 is a tie (two tokens' logprobs
# bit-identical: the tie-break decides). Below NEAR_TIE_NATS the flip is within what a few bf16
# ULPs of a logit of magnitude ~10 can move (bf16 spacing there is 0.0625), i.e. reduction-order
# noise can explain it. Anything larger is `confident`.
TIE_NATS = 0.0
NEAR_TIE_NATS = 0.25

Tokens = Sequence[int]


def first_divergence(a: Tokens, b: Tokens) -> int | None:
    """Index of the first differing token, ``None`` when equal; a strict prefix differs at its end."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


def unique_completions(seqs: Sequence[Tokens]) -> tuple[int, int]:
    """(number of distinct completions, count of the most common one)."""
    if not seqs:
        return 0, 0
    counts = Counter(tuple(s) for s in seqs)
    return len(counts), counts.most_common(1)[0][1]


def pairwise_first_divergence(seqs: Sequence[Tokens]) -> list[tuple[int, int, int]]:
    """``(i, j, first index)`` for every differing pair i < j (distinct completions compared once)."""
    keys = [tuple(s) for s in seqs]
    memo: dict[tuple[tuple[int, ...], tuple[int, ...]], int | None] = {}
    out = []
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            if keys[i] == keys[j]:
                continue
            pair = (keys[i], keys[j])
            if pair not in memo:
                memo[pair] = first_divergence(*pair)
            idx = memo[pair]
            if idx is not None:
                out.append((i, j, idx))
    return out


def divergence_histogram(seqs: Sequence[Tokens]) -> dict[int, int]:
    """Token index of first divergence -> number of differing pairs that first differ there."""
    hist = Counter(idx for _, _, idx in pairwise_first_divergence(seqs))
    return dict(sorted(hist.items()))


def classify_margin(margin: float | None) -> str | None:
    """``tie`` / ``near-tie`` / ``confident`` for a top-1 minus top-2 logprob margin (None: unknown)."""
    if margin is None or (isinstance(margin, float) and math.isnan(margin)):
        return None
    if margin <= TIE_NATS:
        return TIE
    if margin < NEAR_TIE_NATS:
        return NEAR_TIE
    return CONFIDENT


def top_margin(top: Sequence[tuple[int, float]] | None) -> float | None:
    """top-1 minus top-2 logprob from one position's top-k list (needs k >= 2)."""
    if not top or len(top) < 2:
        return None
    lps = sorted((float(lp) for _, lp in top), reverse=True)
    if any(math.isnan(x) for x in lps[:2]):
        return None
    return lps[0] - lps[1]


@dataclass
class SequenceAnalysis:
    """Everything a record needs about one sweep of one probe prompt."""

    samples: int
    unique: int
    most_common: int
    first_divergence: int | None  # smallest first-divergence token index over all pairs
    histogram: dict[int, int]
    margin: float | None
    margin_class: str | None
    first_level: int | None  # smallest concurrency level whose output differs from the reference
    unique_by_level: dict[int, int] = field(default_factory=dict)
    classes: ClassRanges = field(default_factory=list)  # levels grouped by identical completions

    @property
    def diverged(self) -> bool:
        return self.unique > 1

    def evidence(self) -> dict[str, Any]:
        """Evidence fields as the matrix reads them (``unique``/``samples``/``concurrency``/``points``)."""
        levels = sorted(self.unique_by_level)
        first: dict[str, Any] = {}
        if self.diverged:
            first = {
                "batch_size": self.first_level,
                "token_index": self.first_divergence,
                "margin": self.margin,
                "margin_class": self.margin_class,
                "label": f"concurrency {self.first_level}",
            }
        return {
            "samples": self.samples,
            "unique": self.unique,
            "most_common": self.most_common,
            "most_common_fraction": round(self.most_common / self.samples, 6) if self.samples else None,
            "concurrency": levels,
            "points": [{"concurrency": n, "unique": self.unique_by_level[n]} for n in levels],
            "first_divergence": self.first_divergence,
            "divergence_histogram": {str(k): v for k, v in self.histogram.items()},
            "margin": self.margin,
            "margin_class": self.margin_class,
            "margin_thresholds": {"tie": TIE_NATS, "near_tie": NEAR_TIE_NATS},
            "first": first,
            "equivalence_classes": self.classes,
        }

    def describe(self) -> str:
        """``32 samples, 7 unique, first divergence at token 14 (near-tie)``."""
        text = f"{self.samples} samples, {self.unique} unique"
        if self.diverged:
            text += f", first divergence at token {self.first_divergence}"
            if self.margin_class:
                text += f" ({self.margin_class})"
            if self.first_level is not None:
                text += f", first seen at concurrency {self.first_level}"
        return text


def analyze(
    outputs: Mapping[int, Sequence[Tokens]],
    reference: Tokens | None = None,
    reference_top: Sequence[Sequence[tuple[int, float]]] | None = None,
) -> SequenceAnalysis:
    """Analyse probe completions grouped by concurrency level.

    ``reference`` is the completion everything is compared against (default: the first output at
    the lowest level, i.e. the request alone); ``reference_top`` its per-token top-k logprobs, used
    to class the margin at the first flip.
    """
    levels = sorted(outputs)
    flat = [tuple(s) for n in levels for s in outputs[n]]
    if reference is None and flat:
        reference = flat[0]
    ref = tuple(reference or ())
    unique, most = unique_completions(flat)
    hist = divergence_histogram(flat)
    first_tok = min(hist) if hist else None
    # The flip that matters for the margin is the earliest divergence from the reference.
    vs_ref = [d for d in (first_divergence(ref, s) for s in flat) if d is not None]
    flip = min(vs_ref) if vs_ref else first_tok
    margin = None
    if flip is not None and reference_top is not None and flip < len(reference_top):
        margin = top_margin(reference_top[flip])
    first_level = None
    for n in levels:
        if any(tuple(s) != ref for s in outputs[n]):
            first_level = n
            break
    by_level = {n: unique_completions(outputs[n])[0] for n in levels}
    # Equivalence classes of levels by the set of completions each level produced.
    signature: dict[int, Hashable] = {n: frozenset(tuple(s) for s in outputs[n]) for n in levels}
    classes = class_ranges(equivalence_classes(signature)) if levels else []
    return SequenceAnalysis(
        samples=len(flat),
        unique=unique,
        most_common=most,
        first_divergence=first_tok,
        histogram=hist,
        margin=margin,
        margin_class=classify_margin(margin),
        first_level=first_level,
        unique_by_level=by_level,
        classes=classes,
    )


def _bits(x: float | None) -> bytes | None:
    """float64 bit pattern (JSON numbers parse to float64; -0.0 and NaN payloads stay distinct)."""
    return None if x is None else struct.pack("<d", float(x))


def step_difference(
    ref_ids: Tokens, ref_lps: Sequence[float | None] | None, ids: Tokens, lps: Sequence[float | None] | None
) -> dict[str, Any] | None:
    """First step where token ids or logprob bits differ (``None``: bitwise equal).

    Returns ``{"step", "what": "token"|"logprob"|"length", "ref", "got", "abs_diff"}``.
    """
    n = min(len(ref_ids), len(ids))
    for i in range(n):
        if ref_ids[i] != ids[i]:
            return {"step": i, "what": "token", "ref": ref_ids[i], "got": ids[i], "abs_diff": None}
        if ref_lps is not None and lps is not None and i < len(ref_lps) and i < len(lps):
            a, b = ref_lps[i], lps[i]
            if _bits(a) != _bits(b):
                diff = abs(a - b) if a is not None and b is not None else None
                return {"step": i, "what": "logprob", "ref": a, "got": b, "abs_diff": diff}
    if len(ref_ids) != len(ids):
        return {"step": n, "what": "length", "ref": len(ref_ids), "got": len(ids), "abs_diff": None}
    # Logprobs asked on one side only, or fewer than tokens: steps that cannot be compared
    # are a difference, never silently skipped.
    if (ref_lps is None) != (lps is None):
        return {"step": 0, "what": "logprob-missing", "ref": ref_lps is not None, "got": lps is not None,
                "abs_diff": None}  # fmt: skip
    if ref_lps is not None and lps is not None and not (len(ref_lps) == len(lps) == n):
        return {"step": min(len(ref_lps), len(lps)), "what": "logprob-length", "ref": len(ref_lps),
                "got": len(lps), "abs_diff": None}  # fmt: skip
    return None


def logprob_max_abs_diff(a: Sequence[float | None], b: Sequence[float | None]) -> float:
    """Largest |a_i - b_i| over positions where both are numbers (0.0 when none differ)."""
    diffs = [abs(x - y) for x, y in zip(a, b, strict=False) if x is not None and y is not None]
    return max(diffs, default=0.0)
