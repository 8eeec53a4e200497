"""Run-to-run under concurrency: one concurrent workload, replayed K times, must give the same bits.

Batch invariance says a request's output does not depend on what shares its batch; it does not
say that the same traffic gives the same output twice. A reduction whose order follows arrival
(atomics, a work queue, a race between streams) can change bits from one replay to the next
(vllm#51187: 3 distinct outputs in 5 replays at about 44 co-resident sequences). So the workload
here is fixed, seeded and realistic: 32 (quick) or 64 (full) distinct prompts of spread lengths (4 to 130 tokens)
and ``max_tokens``, sent on their own connections at staggered, seeded arrival offsets, every other
one streamed, each replay from an empty prefix cache where the server can empty it (else replay 1
is cold and the rest warm). Every request's token ids and logprob bits must be identical across all replays.
The record reports failures/K (replays that differ from the most common outcome) and which
requests changed, under oracle ``run-to-run``, apart from the batch-dependence sweeps.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pytest_invariance.adapters import AdapterError, Completion, GenParams
from pytest_invariance.adapters.base import Prompt
from pytest_invariance.oracles import sequences as S

from .outcome import Outcome, progress
from .prompts import seeded_prompt
from .target import Target, co_batching

REQUESTS = {"quick": 32, "full": 64}
LENGTHS = (4, 130, 24, 60, 9, 17, 40, 16, 96, 6, 33, 129)  # prompt tokens, cycled (block edges 16/128 +-1)
MAX_TOKENS = {"quick": (4, 8, 12, 6, 10, 5), "full": (16, 32, 48, 24, 64, 40)}  # quick: cheap in `make test`
ARRIVAL_MS = (0.0, 8.0)  # gap between consecutive arrivals, seeded


@dataclass(frozen=True)
class ReplayRequest:
    """One request of the workload: what it sends and when (seconds after the replay starts)."""

    index: int
    prompt: Prompt
    max_tokens: int
    offset_s: float
    stream: bool

    def as_data(self) -> dict[str, Any]:
        return {"request": self.index, "prompt_tokens": len(self.prompt) if isinstance(self.prompt, list) else None,
                "prompt_chars": len(self.prompt) if isinstance(self.prompt, str) else None,
                "max_tokens": self.max_tokens, "offset_ms": round(self.offset_s * 1000, 3), "stream": self.stream}  # fmt: skip


def workload(t: Target, profile: str, seed: int) -> list[ReplayRequest]:
    """The seeded workload: distinct prompts (a different seed each), lengths and ``max_tokens``
    spread, arrivals staggered, every other request streamed where the adapter can stream."""
    n = REQUESTS["quick" if profile == "quick" else "full"]
    caps = MAX_TOKENS["quick" if profile == "quick" else "full"]
    rng = random.Random(seed * 7919 + 17)
    can_stream = hasattr(t.adapter, "generate_streamed")
    out, at = [], 0.0
    for i in range(n):
        if i:
            at += rng.uniform(*ARRIVAL_MS) / 1000.0
        prompt = seeded_prompt(500 + i, LENGTHS[i % len(LENGTHS)], t.options.prompts)
        out.append(ReplayRequest(i, prompt, caps[i % len(caps)], at, can_stream and i % 2 == 1))
    return out


def replay_once(t: Target, work: list[ReplayRequest], bar: Any = None) -> list[Completion]:
    """The workload once: one connection per request, each sent at its offset; answers in order."""
    start = time.monotonic() + 0.02

    def one(r: ReplayRequest) -> Completion:
        delay = start + r.offset_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        params = GenParams(max_tokens=r.max_tokens, logprobs=0 if t.options.logprobs else None)
        call = t.adapter.generate_streamed if r.stream else t.adapter.generate_one  # type: ignore[attr-defined]
        c = t.adapter._parsed(call, r.prompt, params)
        if bar is not None:
            bar.advance()
        return c

    with ThreadPoolExecutor(max_workers=len(work)) as pool:
        return list(pool.map(one, work))


def _signature(c: Completion, logprobs: bool) -> tuple:
    bits = tuple(None if v is None else float(v).hex() for v in (c.logprobs or ())) if logprobs else ()
    return tuple(c.token_ids), bits


def sweep_replay(t: Target, profile: str, seed: int) -> Outcome:
    """The workload replayed ``t.options.replays`` times; every request must match bitwise."""
    k = t.options.replays
    work = workload(t, profile, seed)
    streamed = sum(r.stream for r in work)
    shape = {"sweep": "replay", "requests": len(work), "replays": k, "streamed": streamed,
             "prompt_lengths": [min(LENGTHS), max(LENGTHS)], "arrival_gap_ms": list(ARRIVAL_MS),
             "dispatch": "independent", "compared": t.options.compared, "prompts": t.options.prompts}  # fmt: skip
    runs: list[list[Completion]] = []
    steps: dict[str, dict[int, int]] = {}
    bar = progress(f"replay {t.name}", k * len(work))
    flushed = True
    try:
        for i in range(k):
            flushed = t.adapter.flush_cache() and flushed  # each replay from the same (empty) prefix cache
            before = t.adapter.step_batch_sizes()
            runs.append(replay_once(t, work, bar))
            after = t.adapter.step_batch_sizes() if before is not None else None
            if after is not None:
                steps[f"replay {i + 1}"] = {bs: c - before.get(bs, 0) for bs, c in after.items() if c > before.get(bs, 0)}
    except AdapterError as exc:
        why = f"incomplete after {len(runs)} of {k} replays: {exc}"
        return Outcome(None, {"error": str(exc), "replays_done": len(runs)}, why, shape, error=str(exc))
    out = judge_replays(t, work, runs, shape, steps)
    out.evidence["cache_flushed"] = flushed
    return out


def judge_replays(t: Target, work: list[ReplayRequest], runs: list[list[Completion]], shape: dict,
                  steps: dict[str, dict[int, int]]) -> Outcome:  # fmt: skip
    """failures/K, the requests that changed, and the first difference of each against replay 1."""
    k, lp = len(runs), t.options.logprobs
    outcomes = [tuple(_signature(c, lp) for c in run) for run in runs]
    counts = Counter(outcomes)
    failures = k - counts.most_common(1)[0][1]
    changed = []
    for i, r in enumerate(work):
        sigs = [o[i] for o in outcomes]
        if len(set(sigs)) > 1:
            ref = runs[0][i]
            j = next(j for j in range(1, k) if sigs[j] != sigs[0])
            diff = S.step_difference(ref.token_ids, ref.logprobs, runs[j][i].token_ids, runs[j][i].logprobs)
            changed.append({"request": i, "distinct": len(set(sigs)), "stream": r.stream,
                            "first_difference": {"replay": j + 1, **(diff or {})}})  # fmt: skip
    ev: dict[str, Any] = {"trials": k, "failures": failures, "samples": k * len(work),
                          "unique": len(counts), "distinct_outcomes": len(counts),
                          "changed_requests": changed, "workload": [r.as_data() for r in work],
                          **co_batching(steps)}  # fmt: skip
    if changed:
        first = changed[0]
        ev["first"] = {"token_index": first["first_difference"].get("step"),
                       "label": f"request {first['request']} in replay {first['first_difference']['replay']}"}  # fmt: skip
    text = f"{k} replays of {len(work)} concurrent requests ({shape['streamed']} streamed): "
    if failures:
        ids = ", ".join(f"#{c['request']}" for c in changed[:8]) + (" ..." if len(changed) > 8 else "")
        text += (f"{len(counts)} distinct outcomes, {failures}/{k} replays differ from the most common; "
                 f"{len(changed)} of {len(work)} requests changed: {ids}")  # fmt: skip
    else:
        text += f"0/{k} replays differ, every request bitwise equal"
    blind = None
    if steps and max((max(v, default=0) for v in steps.values()), default=0) <= 1:
        blind = "the requests never shared an engine step (largest step batch 1)"
    if ev.get("max_step_batch"):
        text += f"; largest engine step per replay {ev['max_step_batch']}"
    return Outcome(failures > 0, ev, text, shape, blind=blind)
