"""Sweeps of one batch size: the probe alone vs at each position among distinct neighbours
(needle), and batch 1 vs N compared token by token, logprob bits included (logprobs)."""

from __future__ import annotations

from typing import Any

from pytest_invariance.adapters import AdapterError, GenParams
from pytest_invariance.oracles import sequences as S
from pytest_invariance.oracles.sweeps import probe_positions

from .outcome import (
    Batch,
    Outcome,
    compared_logprobs,
    needs_logprobs,
    partial,
    progress,
    sequence_outcome,
    with_batches,
)
from .prompts import MIXED_LENGTHS, decode_len, described, gen, other, probe
from .target import Target, co_batching, dispatch_shape, send


def sweep_needle(t: Target, profile: str, seed: int) -> Outcome:
    """The probe at each position {0, 1, mid, N-2, N-1} among N-1 distinct neighbours."""
    n = 8 if profile == "quick" else 32
    params, p = gen(t, decode_len(profile)), probe(t)
    shape = {"sweep": "needle", "prompt": described(p), "max_tokens": params.max_tokens, "batch": n,
             **dispatch_shape(t)}  # fmt: skip
    others = [other(t, i, MIXED_LENGTHS[i % len(MIXED_LENGTHS)] // 2 + 8) for i in range(n - 1)]
    positions = probe_positions(n)
    outputs: dict[int, list[list[int]]] = {}
    per_pos: dict[str, list[int]] = {}
    batches: dict[str, dict[int, int]] = {}
    bar = progress(f"needle {t.name}", 1 + n * len(positions))
    try:
        alone = t.adapter.generate([p], params, progress=bar)[0]
        seen = [Batch.of([alone], [0])]
        outputs[1] = [alone.token_ids]
        outputs[n] = []
        lps: dict[int, list[Any]] = {1: [alone.logprobs], n: []}
        for pos in positions:
            batch = others[:pos] + [p] + others[pos:]
            cs = send(t, batch, params, seed * 1000 + pos, bar, batches, f"position {pos}")
            seen.append(Batch.of(cs, [pos]))
            outputs[n].append(cs[pos].token_ids)
            lps[n].append(cs[pos].logprobs)
            per_pos[str(pos)] = cs[pos].token_ids
    except AdapterError as exc:
        return partial(outputs, shape, exc)
    differing = [int(p) for p, ids in per_pos.items() if ids != alone.token_ids]
    return with_batches(sequence_outcome(outputs, alone.top_logprobs, shape,
                                   {"positions": positions, "differing_positions": differing, **co_batching(batches)},
                                   logprobs=compared_logprobs(t, lps)), seen)  # fmt: skip


def sweep_logprobs(t: Target, profile: str, seed: int) -> Outcome:
    """Batch 1 vs batch N: token ids and logprob bits at every step."""
    n = 8 if profile == "quick" else 32
    params, p = GenParams(max_tokens=decode_len(profile), logprobs=2), probe(t)
    shape = {"sweep": "logprobs", "prompt": described(p), "batch": n, "max_tokens": params.max_tokens,
             **dispatch_shape(t)}  # fmt: skip
    if (skip := needs_logprobs(t, shape)) is not None:
        return skip
    batches: dict[str, dict[int, int]] = {}
    try:
        bar = progress(f"logprobs {t.name}", 1 + n)
        alone = t.adapter.generate([p], params, progress=bar)[0]
        batch = [other(t, i, MIXED_LENGTHS[i % len(MIXED_LENGTHS)]) for i in range(n)]
        batch[n // 2] = p
        cs = send(t, batch, params, seed, bar, batches)
    except AdapterError as exc:
        return Outcome(None, {"error": str(exc)}, f"incomplete: {exc}", shape, error=str(exc))
    got = cs[n // 2]
    if alone.logprobs is None or got.logprobs is None:
        return Outcome(
            None, {}, "no per-token logprobs returned", shape, unsupported="the server returned no logprobs"
        )
    diff = S.step_difference(alone.token_ids, alone.logprobs, got.token_ids, got.logprobs)
    steps = min(len(alone.token_ids), len(got.token_ids))
    ev = {"samples": 2, "unique": 1 if diff is None else 2, "concurrency": [1, n], "steps": steps,
          "first_step_difference": diff,
          "max_abs_logprob_diff": S.logprob_max_abs_diff(alone.logprobs, got.logprobs),
          "first": {"batch_size": n, "token_index": diff["step"], "label": f"{diff['what']} at step {diff['step']}"} if diff else {},
          **co_batching(batches)}  # fmt: skip
    if diff and diff["what"] == "token" and alone.top_logprobs:
        m = S.top_margin(alone.top_logprobs[diff["step"]])
        ev["first"].update(margin=m, margin_class=S.classify_margin(m))
    text = f"batch 1 vs {n}: " + ("token ids and logprob bits equal at all "
                                   f"{steps} steps" if diff is None else f"first {diff['what']} difference at step {diff['step']}")  # fmt: skip
    return Outcome(diff is not None, ev, text, shape, batches=[Batch.of([alone], [0]), Batch.of(cs, [n // 2])])
