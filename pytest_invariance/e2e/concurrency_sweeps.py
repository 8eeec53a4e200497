"""Sweeps over concurrency levels: the probe alone and in batches of 1..N (single), beside
neighbours of very different lengths (mixed), and sampled with one seed (seeded)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_invariance.adapters import AdapterError, GenParams
from pytest_invariance.adapters.base import INDEPENDENT

from .ladder import crossing_levels, target_ladder
from .outcome import Batch, Outcome, compared_logprobs, partial, progress, sequence_outcome, with_batches
from .prompts import MIXED_LENGTHS, decode_len, described, gen, other, probe
from .target import COMPARED, JITTER_MS, Target, co_batching, dispatch_shape, send

# Powers of two (kernel switch points) by sweep and profile; ``levels`` adds the ladder's edges +-1.
BASE_LEVELS = {
    "quick": {"single": (1, 2, 4, 8, 16), "mixed": (1, 4, 8, 16), "seeded": (1, 4, 8)},
    "full": {"single": (1, 2, 4, 8, 16, 32, 64, 128), "mixed": (1, 4, 8, 16, 32, 64), "seeded": (1, 4, 8, 16, 32)},
}


# One wide batch past the ladder crossings, so a kernel switch at a size that is no ladder edge and
# above the crossings (a tile or heuristic boundary at 48 rows, say) still shows: the per-op quick
# profile's largest batch (64 + 1), one more list request, capped at the target's reported
# max_num_seqs so that it runs as one step. full already crosses to 129.
REACH = {"quick": {"single": 65}, "full": {}}


def wide_batch(profile: str, sweep: str, info: dict | None) -> list[int]:
    """The profile's wide batch for ``sweep`` (none, or one size), within the target's max_num_seqs."""
    n = REACH["quick" if profile == "quick" else "full"].get(sweep)
    cap = (info or {}).get("max_num_seqs")
    if n is not None and isinstance(cap, int) and not isinstance(cap, bool) and cap >= 2:
        n = min(n, cap)
    return [] if n is None else [n]


def levels(profile: str, t: Target | None = None, sweep: str = "single") -> list[int]:
    """Concurrencies of a sweep: the target's ``--invariance-levels`` (single and mixed), else the
    profile's powers of two plus every capture-ladder edge -1, edge, +1 up to the profile's limit
    (the target's reported ladder, else the vLLM/SGLang defaults: :mod:`.ladder`), plus the
    profile's wide batch (``REACH``)."""
    if t is not None and t.options.levels and sweep != "seeded":
        return sorted(set(t.options.levels))
    base = list(BASE_LEVELS["quick" if profile == "quick" else "full"][sweep])
    return base if t is None else sorted(set(crossing_levels(base, target_ladder(t.info)) + wide_batch(profile, sweep, t.info)))


def _ladder_note(t: Target, lv: list[int], wide: int | None = None) -> dict:
    """The ladder the levels were drawn from, for the evidence (None where ``--invariance-levels`` set
    them): the edges crossed, up to the largest level short of the wide batch."""
    if t.options.levels:
        return {"ladder": {"source": "--invariance-levels", "edges": []}}
    return {"ladder": target_ladder(t.info).evidence(max(n for n in lv if n != wide or n == min(lv)))}


def sweep_single(t: Target, profile: str, seed: int) -> Outcome:
    """One prompt at concurrency 1..N: N identical greedy requests with staggered arrivals."""
    lv = levels(profile, t)
    params, p = gen(t, decode_len(profile)), probe(t)
    wide = None if t.options.levels else next(iter(wide_batch(profile, "single", t.info)), None)
    shape = {"sweep": "single", "prompt": described(p), "max_tokens": params.max_tokens, "levels": lv,
             **({"wide_batch": wide} if wide else {}), **dispatch_shape(t)}  # fmt: skip
    return _over_levels(t, lv, params, seed, shape, lambda n: ([p] * n, list(range(n))))


def sweep_mixed(t: Target, profile: str, seed: int) -> Outcome:
    """Neighbours of very different lengths, so prefill chunks and decodes share steps."""
    lv = levels(profile, t, "mixed")
    params, p = gen(t, decode_len(profile)), probe(t)
    shape = {"sweep": "mixed", "prompt": described(p), "max_tokens": params.max_tokens, "levels": lv,
             "neighbour_lengths": list(t.options.neighbour_tokens or MIXED_LENGTHS), **dispatch_shape(t)}  # fmt: skip

    def batch_of(n: int) -> tuple[list, list[int]]:
        batch = [other(t, i, MIXED_LENGTHS[i % len(MIXED_LENGTHS)]) for i in range(n)]
        slots = sorted({0, n // 2})
        for s in slots:
            batch[s] = p
        return batch, slots

    return _over_levels(t, lv, params, seed, shape, batch_of)


def _over_levels(t: Target, lv: list[int], params: GenParams, seed: int, shape: dict,
                 batch_of: Callable[[int], tuple[list, list[int]]]) -> Outcome:  # fmt: skip
    """One list request (or jittered set) per level; the probe's slots in each are compared."""
    outputs: dict[int, list[list[int]]] = {}
    lps: dict[int, list[Any]] = {}
    batches: dict[str, dict[int, int]] = {}
    seen: list[Batch] = []
    ref_top = None
    bar = progress(f"{shape['sweep']} {t.name}", sum(lv))
    try:
        for n in lv:
            batch, slots = batch_of(n)
            cs = send(t, batch, params, seed * 1000 + n, bar, batches)
            seen.append(Batch.of(cs, slots))
            outputs[n] = [cs[s].token_ids for s in slots]
            lps[n] = [cs[s].logprobs for s in slots]
            if ref_top is None:
                ref_top = cs[0].top_logprobs
    except AdapterError as exc:
        return partial(outputs, shape, exc)
    note = _ladder_note(t, lv, shape.get("wide_batch"))
    return with_batches(sequence_outcome(outputs, ref_top, shape, {**co_batching(batches), **note},
                                         logprobs=compared_logprobs(t, lps)), seen)


def seeded_sweep(t: Target, profile: str, seed: int) -> tuple[Outcome, list]:
    """The probe sampled with one seed at each concurrency, then four requests with seeds 1..4."""
    lv = levels(profile, t, "seeded")
    params, p = GenParams(max_tokens=16, temperature=1.0, seed=1234), probe(t)
    shape = {"sweep": "seeded-sampling", "prompt": described(p), "temperature": 1.0, "seed": 1234, "levels": lv,
             "max_tokens": params.max_tokens, **dispatch_shape(t),
             "seeds_control_dispatch": INDEPENDENT}  # fmt: skip
    outputs: dict[int, list[list[int]]] = {}
    bar = progress(f"seeded {t.name}", sum(lv) + 4)
    others: list = []
    try:
        for n in lv:
            cs = send(t, [p] * n, params, seed * 1000 + n, bar)
            outputs[n] = [c.token_ids for c in cs]
        # Four different seeds cannot share one list request (one set of sampling parameters each).
        seeds = [GenParams(max_tokens=16, temperature=1.0, seed=s) for s in (1, 2, 3, 4)]
        others = t.adapter.generate(
            [p] * 4, seeds, jitter_ms=JITTER_MS, seed=seed, progress=bar
        )
        out = sequence_outcome(outputs, None, shape, _ladder_note(t, lv))
        out.summary += f" [compared: {COMPARED['text' if t.options.evidence == 'text' else 'tokens']}]"
        return out, others
    except AdapterError as exc:
        return partial(outputs, shape, exc), others
