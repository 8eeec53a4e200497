"""What a sweep observed (:class:`Outcome`) and the helpers that turn completions into one.

The comparisons live in ``oracles.sequences``; these helpers only assemble the evidence.
Verdicts and records are :mod:`pytest_invariance.e2e.checks`'s job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_invariance.adapters import AdapterError, Completion, Progress
from pytest_invariance.oracles import sequences as S
from pytest_invariance.oracles.classes import ClassRanges, class_ranges, equivalence_classes, format_ranges

from .target import Target


@dataclass
class Batch:
    """One batch as sent and answered, in request order: what a replay of its steps needs."""

    prompts: list[list[int] | None]  # prompt token ids as the server reported them
    tokens: list[list[int]]
    logprobs: list[list[float | None] | None]
    probe_slots: list[int]  # which requests are the probe

    @classmethod
    def of(cls, cs: list[Completion], probe_slots: list[int]) -> Batch:
        return cls([c.prompt_token_ids for c in cs], [c.token_ids for c in cs], [c.logprobs for c in cs], probe_slots)


@dataclass
class Outcome:
    """What one sweep on one target observed."""

    diverged: bool | None
    evidence: dict
    summary: str
    shape: dict
    error: str | None = None
    unsupported: str | None = None
    blind: str | None = None  # why equality here could not count as a pass (e.g. cache hit not proven)
    batches: list[Batch] = field(default_factory=list)  # the probe alone first, then the batches it shared
    localization: dict | None = None  # e2e.localization's replay, computed once per outcome


Sweep = Callable[[Target, str, int], Outcome]


def progress(label: str, total: int) -> Progress:
    return Progress(total, label)


def sequence_outcome(
    outputs: dict[int, list[list[int]]],
    ref_top: Any,
    shape: dict,
    extra: dict | None = None,
    logprobs: dict[int, list[Any]] | None = None,
) -> Outcome:
    """Unique samples by token ids, and under the bitwise contract also by logprob bits: two
    completions with equal tokens but different logprob bits came from different arithmetic."""
    an = S.analyze(outputs, reference=outputs[min(outputs)][0], reference_top=ref_top)
    ev = {**an.evidence(), **(extra or {})}
    diverged, text = an.diverged, an.describe()
    if logprobs is not None:
        low = min(outputs)
        ref_ids, ref_lps = outputs[low][0], logprobs[low][0]
        diffs = [
            {"concurrency": n, **d}
            for n in sorted(outputs)
            for ids, lps in zip(outputs[n], logprobs[n], strict=True)
            if (d := S.step_difference(ref_ids, ref_lps, ids, lps)) is not None
        ]
        ev["bitwise_differing_samples"] = len(diffs)
        ev["first_bitwise_difference"] = diffs[0] if diffs else None
        if diffs and not an.diverged:
            diverged = True
            d = diffs[0]
            text += (f"; token ids equal but logprob bits differ in {len(diffs)} sample(s), "
                     f"first at concurrency {d['concurrency']}, step {d['step']}")  # fmt: skip
    if logprobs is not None:  # classes by ids and logprob bits: a padded bucket may move bits only
        ev["equivalence_classes"] = bit_classes(outputs, logprobs)
    if len(ev.get("equivalence_classes") or []) > 1 or ev.get("ladder", {}).get("edges"):
        text += f"; classes {format_ranges(ev['equivalence_classes'])}"
        if ev.get("ladder"):
            text += f" ({describe_ladder(ev['ladder'])})"
    if ev.get("max_step_batch"):
        # so that an equal (possibly vacuous) result says whether the requests ever shared a step
        text += f"; largest engine step per level {ev['max_step_batch']}"
    return Outcome(diverged, ev, text, shape)


def bit_classes(outputs: dict[int, list[list[int]]], logprobs: dict[int, list[Any]]) -> ClassRanges:
    """Levels grouped by the set of (token ids, logprob bits) each produced."""
    sig = {n: frozenset((tuple(ids), tuple(None if v is None else float(v).hex() for v in (lps or ())))
                        for ids, lps in zip(outputs[n], logprobs[n], strict=True)) for n in outputs}  # fmt: skip
    return class_ranges(equivalence_classes(sig))


def describe_ladder(ladder: dict) -> str:
    edges = ladder.get("edges") or []
    return f"bucket edges {','.join(map(str, edges))}: {ladder['source']}" if edges else ladder["source"]


def partial(outputs: dict[int, list[list[int]]], shape: dict, exc: AdapterError) -> Outcome:
    ev: dict = {"error": str(exc), "url": exc.url, "field": exc.field}
    if outputs:
        ev.update(S.analyze(outputs).evidence())
    return Outcome(None, ev, f"incomplete: {exc}", shape, error=str(exc))


def with_batches(out: Outcome, batches: list[Batch]) -> Outcome:
    out.batches = batches
    return out


def compared_logprobs(t: Target, lps: dict[int, list[Any]]) -> dict[int, list[Any]] | None:
    return lps if t.options.logprobs else None


def needs_logprobs(t: Target, shape: dict) -> Outcome | None:
    """``unsupported`` for a sweep that compares logprob bits when the session compares tokens/text."""
    if t.options.logprobs:
        return None
    why = f"this sweep compares logprobs; the session compares {t.options.compared} only (--invariance-evidence)"
    return Outcome(None, {}, why, shape, unsupported=why)
