"""Hypothesis strategies for the workload around the probe.

Everything is drawn so that hypothesis's own shrinking ends at a readable reproducer: a list of
neighbours shrinks by deleting requests, offsets shrink to 0 (simultaneous), lengths to the first
boundary, optional parameters to absent, streaming and disconnects to off, ``n`` to 1. No shrinker
of our own: the workload is a pure function of what hypothesis drew.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from .params import BY_NAME, CHAT, COMPLETIONS, apply, base_body

PRINTABLE = (32, 127)  # token ids that are printable bytes: valid in any byte-level vocabulary
# Arrivals in percent of the probe-alone latency, before (-) and after (+) the probe: scaled to the
# target, so a neighbour lands in the probe's prefill or decode on a 20 ms fake and a 1 s CPU engine alike.
EARLY_PCT, LATE_PCT = 30, 100


@dataclass(frozen=True)
class Space:
    """What the fuzzer may generate on one target.

    ``block`` and ``chunk``: the KV block and prefill chunk the server reports (its ``/server_info``),
    whose edges +-1 the prompt lengths and shared prefixes visit; ``max_len``: the longest prompt
    the server takes with room for the answer; ``params``: per route, the parameters it accepted."""

    probe_ids: tuple[int, ...]
    probe_max_tokens: int
    model: str | None
    block: int
    chunk: int
    max_len: int
    params: dict[str, tuple[str, ...]] = field(default_factory=dict)
    extras: bool = True  # ask for vLLM-style token ids (return_token_ids, ignore_eos) in the probe
    text_prompts: bool = False  # completions prompts as text (servers that refuse token ids)
    max_neighbours: int = 4
    max_n: int = 2
    max_tokens: int = 12
    probe_ms: float = 500.0  # the probe alone's latency (the search measures it): arrival offsets scale with it

    def boundaries(self) -> list[int]:
        """Prompt lengths at the block and chunk edges, -1, edge, +1 (and two blocks), in range."""
        edges = {1, 2}
        for b in (self.block, 2 * self.block, self.chunk):
            edges.update((b - 1, b, b + 1))
        return sorted(n for n in edges if 1 <= n <= self.max_len)

    def prefixes(self) -> list[int]:
        """How much of the probe a neighbour shares: none, one token, block edges, all of it."""
        n = len(self.probe_ids)
        return sorted({0, 1, n} | {x for b in (self.block,) for x in (b - 1, b, b + 1) if x <= n})

    def probe_body(self) -> dict:
        body: dict[str, Any] = {"prompt": self.prompt(list(self.probe_ids)), "max_tokens": self.probe_max_tokens,
                                "temperature": 0.0, "logprobs": 1}  # fmt: skip
        if self.model:
            body["model"] = self.model
        if self.extras:
            body.update(return_token_ids=True, ignore_eos=True)
        return body

    def offset(self, pct: int) -> int:
        return round(pct * self.probe_ms / 100)

    def prompt(self, ids: list[int]) -> list[int] | str:
        return "".join(chr(i) for i in ids) if self.text_prompts else ids

    def as_evidence(self) -> dict:
        return {"probe_tokens": len(self.probe_ids), "probe_max_tokens": self.probe_max_tokens,
                "block": self.block, "chunk": self.chunk, "max_len": self.max_len,
                "prompt_lengths": self.boundaries(), "shared_prefixes": self.prefixes(),
                "max_neighbours": self.max_neighbours, "max_n": self.max_n, "max_tokens": self.max_tokens,
                "offsets_ms": [-self.offset(EARLY_PCT), self.offset(LATE_PCT)], "prompts": "text" if self.text_prompts else "ids"}  # fmt: skip


def probe_ids(length: int, seed: int) -> tuple[int, ...]:
    rng = random.Random(90_000 + seed)
    return tuple(rng.randrange(*PRINTABLE) for _ in range(length))


def _tokens(prefix: tuple[int, ...], length: int, seed: int) -> list[int]:
    """``length`` token ids: the probe's first ``len(prefix)`` then seeded ones of the neighbour's own."""
    rng = random.Random(seed)
    own = [rng.randrange(*PRINTABLE) for _ in range(max(length - len(prefix), 0))]
    return (list(prefix) + own)[:length]


@st.composite
def neighbour(draw: st.DrawFn, space: Space) -> dict:
    """One co-running request: route, prompt (length at a boundary or anywhere, sharing a prefix of
    the probe), max_tokens, n, streaming and a mid-stream hang-up, arrival offset, parameters."""
    routes = [r for r in (COMPLETIONS, CHAT) if r in space.params]
    route = draw(st.sampled_from(routes))
    length = draw(st.one_of(st.sampled_from(space.boundaries()), st.integers(1, space.max_len)))
    shared = min(draw(st.sampled_from(space.prefixes())), length)
    ids = _tokens(space.probe_ids[:shared], length, draw(st.integers(0, 2**16)))
    body = base_body(route, space.model, ids)
    if route == COMPLETIONS:
        body["prompt"] = space.prompt(ids)
    # as long as the probe's answer unless drawn otherwise: shrinking ends at a neighbour that lives
    # through the probe's whole decode, so a shrunk workload does not hang on a few ms of timing
    p = space.probe_max_tokens
    body["max_tokens"] = p + draw(st.integers(1 - p, max(space.max_tokens - p, 0)))
    body["temperature"] = 0.0  # OpenAI's default is 1.0: neighbours are greedy unless a draw says otherwise
    n = draw(st.integers(1, space.max_n))
    if n > 1:
        body["n"] = n
    optional = {name: BY_NAME[name].strategy for name in space.params[route]}
    for name, value in draw(st.fixed_dictionaries({}, optional=optional)).items():
        apply(body, name, value)
    req: dict[str, Any] = {"route": route, "body": body, "offset_ms": space.offset(draw(st.integers(-EARLY_PCT, LATE_PCT)))}
    if draw(st.booleans()):
        body["stream"] = True
    if body.get("stream"):
        cut = draw(st.one_of(st.none(), st.integers(1, 6)))
        if cut is not None:
            req["disconnect_after_chunks"] = cut
    return req


def workloads(space: Space) -> st.SearchStrategy[dict]:
    """The probe (fixed) with 1..``max_neighbours`` neighbours."""
    probe = {"route": COMPLETIONS, "body": space.probe_body()}
    return st.lists(neighbour(space), min_size=1, max_size=space.max_neighbours).map(
        lambda ns: {"probe": probe, "neighbours": ns}
    )


def size(workload: dict) -> int:
    """Requests in a workload, the probe included (what the control's goal counts)."""
    return 1 + len(workload.get("neighbours", []))
