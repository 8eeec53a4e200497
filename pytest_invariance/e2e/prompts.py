"""What the e2e sweeps send: the probe, its neighbours, shared prefixes and greedy parameters.

Every prompt is seeded (the same on every run and on the target and its control), and a list
request carries prompts of one kind (all text or all token ids), as the target's options say.
"""

from __future__ import annotations

import random

from pytest_invariance.adapters import GenParams
from pytest_invariance.adapters.base import Prompt

from .target import Target

PROBE = "The quick brown fox"
# Neighbour texts of very different lengths (characters ~ tokens for byte-level tokenizers).
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma "
         "tau upsilon phi chi psi omega").split()  # fmt: skip
MIXED_LENGTHS = (6, 300, 24, 160, 48, 220, 12, 96, 4, 260, 36, 128, 18, 200, 64, 8)


def neighbour(i: int, length: int) -> str:
    """A distinct, seeded prompt of roughly ``length`` characters."""
    rng = random.Random(1000 + i)
    words: list[str] = [f"[{i}]"]
    while sum(len(w) + 1 for w in words) < length:
        words.append(rng.choice(WORDS))
    return " ".join(words)[: max(length, 3)]


def seeded_prompt(i: int, length: int, kind: str) -> list[int] | str:
    """A distinct, seeded prompt of ``length`` tokens: ids in 32..126 (printable bytes, valid in any
    byte-level vocabulary), or ``length`` words (about one token each for a BPE that learned them)."""
    rng = random.Random(7000 + i)
    if kind == "ids":
        return [rng.randrange(32, 127) for _ in range(length)]
    return " ".join([f"[{i}]"] + [rng.choice(WORDS) for _ in range(max(length - 1, 0))])


def probe(t: Target) -> Prompt:
    """The probe request's prompt: the short text, or ``probe_tokens`` long (``--invariance-probe-tokens``)."""
    o = t.options
    return PROBE if o.probe_tokens is None else seeded_prompt(0, o.probe_tokens, o.prompts)


def other(t: Target, i: int, default_length: int) -> Prompt:
    """Neighbour ``i``: built-in text of ``default_length`` characters with the short probe, else a
    seeded prompt of the kind the probe is (a list request carries all ids or all text), its length
    from ``--invariance-neighbour-tokens`` (cycled) or ``default_length`` tokens."""
    o = t.options
    if o.probe_tokens is None and o.neighbour_tokens is None:
        return neighbour(i, default_length)
    length = o.neighbour_tokens[i % len(o.neighbour_tokens)] if o.neighbour_tokens else default_length
    return seeded_prompt(i + 1, length, o.prompts)


def gen(t: Target, max_tokens: int, logprobs: int = 2) -> GenParams:
    """Greedy parameters; logprobs only where the session compares them (``evidence``)."""
    return GenParams(max_tokens=max_tokens, logprobs=logprobs if t.options.logprobs else None)


def described(p: Prompt) -> str | int:
    return p if isinstance(p, str) and len(p) <= 40 else (f"{len(p)} tokens" if isinstance(p, list) else f"{len(p)} chars")


def decode_len(profile: str, quick: int = 48) -> int:
    """Greedy tokens per request: longer in ``full``, where a late near-tie still gets its chance
    (a Llama-3-8B-sized model on the H200 forked at token 31 and 74 in the engine benchmark)."""
    return quick if profile == "quick" else 96


def shared_prefix(t: Target, rng: random.Random, length: int, n: int) -> list[Prompt]:
    """``n`` prompts sharing a ``length``-token prefix, then 6 tokens each of their own: token ids,
    or words where the server takes text only (``length`` words, about as many tokens)."""
    if t.options.prompts == "ids":
        prefix = [rng.randrange(32, 127) for _ in range(length)]
        return [prefix + [rng.randrange(32, 127) for _ in range(6)] for _ in range(n)]
    head = " ".join(rng.choice(WORDS) for _ in range(length))
    return [head + " " + " ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(n)]
