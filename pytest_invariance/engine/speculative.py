"""Speculative decoding by prompt lookup: n-gram drafts, verified by the target in one forward.

Why prompt lookup: it needs no draft model, so the only thing that changes between speculative and
plain decoding is how the *target* computes a token -- k+1 positions in one pass (a prefill-shaped
chunk with a prefix) instead of one decode at a time. That is exactly the axis under test: under
exact arithmetic greedy speculation equals greedy plain decoding; in invariant mode (decode at t ==
prefill at t, bitwise) it must equal it bit for bit.

Acceptance reuses the engine's own sampler on every verified row, with the position each row's
token would have in plain decoding. Greedy rows take the argmax; seeded rows take the
counter-based draw keyed by (seed, position), which does not depend on how many rows were drawn
before it, so a draft is accepted exactly when plain decoding would have produced it. The
engine-wide RNG control (``shared_rng``) draws in batch order, so there speculation is refused for
sampled requests.
"""

from __future__ import annotations

from dataclasses import dataclass

OFF = "off"
METHODS = ("ngram",)
MAX_K = 16
NGRAM_MAX = 3  # longest suffix looked up (as vLLM's prompt_lookup_max default)
NGRAM_MIN = 1


@dataclass(frozen=True)
class SpecConfig:
    """``method`` and ``k`` (draft tokens per step) of a ``--speculative`` value; k == 0 is off."""

    method: str = OFF
    k: int = 0

    @property
    def enabled(self) -> bool:
        return self.k > 0


def parse_speculative(text: str | None) -> SpecConfig:
    """``off`` (or empty) or ``ngram:K`` with 1 <= K <= 16; ValueError naming the value otherwise."""
    if text is None or text.strip() in ("", OFF):
        return SpecConfig()
    method, sep, k = text.strip().partition(":")
    if method not in METHODS or not sep or not k.isdigit() or not 1 <= int(k) <= MAX_K:
        raise ValueError(f"speculative must be 'off' or 'ngram:K' with 1 <= K <= {MAX_K}, got {text!r}")
    return SpecConfig(method, int(k))


def propose_ngram(tokens: list[int], k: int, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the longest suffix
    (``n_max`` down to ``n_min`` tokens) of ``tokens``; empty when no suffix recurs.

    The most recent occurrence, because in repetitive text the latest period is the likeliest
    continuation."""
    if k <= 0:
        return []
    t = len(tokens)
    for n in range(min(n_max, t - 1), n_min - 1, -1):
        suffix = tokens[t - n :]
        for start in range(t - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + k]
    return []


def accepted_tokens(target: list[int], draft: list[int]) -> list[int]:
    """Tokens one verification emits: the drafts the target agrees with, then the target's own token
    at the first disagreement (or its bonus token after the last draft). ``target`` has one token per
    verified row, ``len(draft) + 1`` of them."""
    if len(target) != len(draft) + 1:
        raise ValueError(f"{len(target)} target tokens for {len(draft)} drafts (need drafts + 1)")
    m = 0
    while m < len(draft) and target[m] == draft[m]:
        m += 1
    return target[: m + 1]


@dataclass
class SpecStats:
    """Counters for /server_info: a run where nothing was ever accepted tested nothing."""

    verify_steps: int = 0  # sequence-steps that verified at least one draft
    draft_tokens: int = 0
    accepted_tokens: int = 0

    def as_dict(self) -> dict[str, float | int]:
        rate = self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0
        return {"verify_steps": self.verify_steps, "draft_tokens": self.draft_tokens,
                "accepted_tokens": self.accepted_tokens, "acceptance_rate": rate}  # fmt: skip
