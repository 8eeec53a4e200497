"""Inputs and calls of the attention suites: sequences, paged caches, the split-KV controls, refusals.

A check's rows are handles into a ``Pool`` of sequences; prefill and decode differ only in how a
batch of rows runs (``prefill_rows`` / ``decode_rows``). ``check_attention`` is the one batch check
both families share.
"""

from __future__ import annotations

import functools

import pytest
from pytest_invariance.oracles.vocabulary import QUANTIZATION_OF_DTYPE as QUANT

from ._attention_cases import (
    CONTROL,
    CPU_MUTANT_KW,
    PAGE,
    dtype_name,
    expect_for_length,
    heads_of,
    kernels_of,
    record_extra,
    record_shape,
    sizes_of,
    skip_unavailable,
    split_of,
    trials_of,
)

torch = pytest.importorskip("torch")


def control_of(kernels: dict, family: str, device: str, oracle: str):
    """(callable, name) of the positive control: the split-KV mutant (SM budget varying per call for run-to-run)."""
    from pytest_invariance.reference_kernels.mutants.splitkv_decode import varying_sm_count

    name = CONTROL[family]
    fn = kernels[name].fn
    kw = {"min_keys": CPU_MUTANT_KW["min_keys"]} if device == "cpu" else {}
    if oracle == "run-to-run":
        # An occupancy target of SMs x resident blocks that changes per call: with the
        # whole pool in one call even 132 SMs give one split, so the budget must reach past it.
        budgets = (132 * 16, 132 * 4, 132, 8)
        return varying_sm_count(
            functools.partial(fn, **kw), budgets
        ), f"{name} (occupancy target varying per call)"
    return configured(kernels[name], device), name


def configured(kernel, device: str):
    """The kernel with the suite's split size (reference) or CPU heuristic scale (mutants)."""
    if kernel.role == "reference":
        return functools.partial(kernel.fn, split_size=split_of(device))
    if kernel.role == "mutant" and device == "cpu":
        return functools.partial(kernel.fn, **CPU_MUTANT_KW)
    return kernel.fn


def sequence(seed: int, length: int, heads, dtype, device):
    """q, k, v of one sequence: order-sensitive values, seeded."""
    from pytest_invariance.oracles.inputs import wide_spread

    hq, hkv, d = heads
    q = wide_spread((length, hq, d), seed, dtype, decades=1.0, device=device)
    k = wide_spread((length, hkv, d), seed + 1, dtype, decades=1.0, device=device)
    v = wide_spread((length, hkv, d), seed + 2, dtype, decades=1.0, device=device)
    return q, k, v


class Pool:
    """Sequences of one trial; oracle rows are int64 handles into it (row 0 is the probe)."""

    def __init__(self, heads, dtype, device, probe_len: int, n: int, mixed: bool):
        self.heads, self.dtype, self.device = heads, dtype, device
        self.split = split_of(device)
        self.probe_len, self.n, self.mixed = probe_len, n, mixed
        self.seqs: list = []

    def make(self, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        hi = max(2, self.probe_len + self.split)
        lens = [self.probe_len] + [
            int(torch.randint(1, hi + 1, (1,), generator=g)) if self.mixed else self.probe_len
            for _ in range(self.n - 1)
        ]
        self.seqs = [
            sequence(seed * 1000 + 3 * i, L, self.heads, self.dtype, self.device) for i, L in enumerate(lens)
        ]
        return torch.arange(self.n, dtype=torch.int64)[:, None]

    def pad(self, outs: list[torch.Tensor]) -> torch.Tensor:
        """Per-sequence outputs [L, H, D] zero-padded to the pool's longest, stacked."""
        lmax = max(s[0].shape[0] for s in self.seqs)
        full = torch.zeros((len(outs), lmax, *outs[0].shape[1:]), dtype=outs[0].dtype, device=outs[0].device)
        for i, o in enumerate(outs):
            full[i, : o.shape[0]] = o
        return full


def cu_seqlens(lengths: list[int], device) -> torch.Tensor:
    c = [0]
    for n in lengths:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=torch.int32, device=device)


def run_prefill(fn, seqs: list) -> list[torch.Tensor]:
    """One varlen prefill call over ``seqs``; per-sequence outputs."""
    q = torch.cat([s[0] for s in seqs])
    k = torch.cat([s[1] for s in seqs])
    v = torch.cat([s[2] for s in seqs])
    lens = [s[0].shape[0] for s in seqs]
    cu = cu_seqlens(lens, q.device)
    out = fn(q, k, v, cu, cu, causal=True)
    return list(torch.split(out, lens))


def paged_batch(ks: list, vs: list, lens: list[int], device):
    """Caches holding each sequence's first ``lens[i]`` K/V, blocks assigned in reverse batch order."""
    from pytest_invariance.reference_kernels.attention import slot_mapping_for, write_kv

    hkv, d = ks[0].shape[1:]
    nblk = [-(-n // PAGE) for n in lens]
    total, maxb = sum(nblk), max(nblk)
    kc = torch.zeros((total + 1, PAGE, hkv, d), dtype=ks[0].dtype, device=device)
    vc = torch.zeros_like(kc)
    bt = torch.zeros((len(lens), maxb), dtype=torch.int32, device=device)
    nxt = total  # reverse order: the probe's physical blocks move as the batch grows
    for i, n in enumerate(lens):
        nxt -= nblk[i]
        bt[i, : nblk[i]] = torch.arange(nxt, nxt + nblk[i], dtype=torch.int32, device=device)
        write_kv(kc, vc, ks[i][:n], vs[i][:n], slot_mapping_for(bt, i, 0, n, PAGE))
    return kc, vc, bt, torch.tensor(lens, dtype=torch.int32, device=device)


def run_decode(fn, qs: list, ks: list, vs: list, lens: list[int]) -> torch.Tensor:
    """Decode of each sequence's query at position ``lens[i] - 1``; [B, Hq, D]."""
    kc, vc, bt, sl = paged_batch(ks, vs, lens, qs[0].device)
    return fn(torch.stack(qs), kc, vc, bt, sl)


def refusal(call) -> str | None:
    """A backend's refusal of this configuration ("No available kernel"), or None when it runs.

    SDPA backends decline some inputs outright (memory-efficient with GQA, say): that
    is a fact about the backend, recorded as ``unsupported``, not a failed check.
    """
    try:
        call()
    except RuntimeError as exc:
        if "No available kernel" not in str(exc):
            raise
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return None


def skip_unsupported(invariance, reason: str | None, **fields) -> None:
    """Record ``unsupported`` (with the backend's words) and skip; no-op when ``reason`` is None."""
    if reason is None:
        return
    from pytest_invariance.oracles.verdict import UNSUPPORTED

    invariance.record(
        verdict=UNSUPPORTED, contract="bitwise", evidence={"error": reason}, seed=invariance.seed,
        trials=0, profile=invariance.profile, **fields,
    )  # fmt: skip
    pytest.skip(f"{fields.get('implementation')}: {reason}")


def prefill_rows(fn, pool: Pool, rows: torch.Tensor) -> torch.Tensor:
    """Prefill of the pool sequences named by ``rows[:, 0]``, padded to one batch."""
    return pool.pad(run_prefill(fn, [pool.seqs[int(i)] for i in rows[:, 0]]))


def decode_rows(fn, pool: Pool, rows: torch.Tensor) -> torch.Tensor:
    """Decode step of each pool sequence named by ``rows[:, 0]`` (query = last token)."""
    seqs = [pool.seqs[int(i)] for i in rows[:, 0]]
    lens = [s[0].shape[0] for s in seqs]
    return run_decode(fn, [s[0][-1] for s in seqs], [s[1] for s in seqs], [s[2] for s in seqs], lens)


def check_attention(
    invariance, family: str, device: str, name: str, cfg: str, length: int, oracle: str, run_rows
) -> None:
    """One attention check; prefill and decode differ only in how a batch of rows runs."""
    skip_unavailable(device, name)
    kernels = {k.name: k for k in kernels_of(family, device)}
    kernel = kernels[name]
    heads, dt = heads_of(device, cfg), getattr(torch, dtype_name(device, name))
    sizes = sizes_of(invariance, device, length)
    pool = Pool(heads, dt, device, length, max(sizes), mixed=kernel.role != "stock")

    def as_rows(fn):
        def run(rows: torch.Tensor) -> torch.Tensor:
            return run_rows(fn, pool, rows)

        return run

    shape = record_shape(cfg, heads, length, device, pool.mixed)
    if kernel.role == "stock":
        pool.make(invariance.seed)
        alone, whole = (
            torch.zeros((1, 1), dtype=torch.int64),
            torch.arange(pool.n, dtype=torch.int64)[:, None],
        )

        def both_ends() -> None:  # the probe alone and the largest batch (backends refuse by shape)
            run_rows(kernel.fn, pool, alone)
            run_rows(kernel.fn, pool, whole)

        skip_unsupported(
            invariance, refusal(both_ends), family=family, implementation=name,
            oracle=oracle, quantization=QUANT[dtype_name(device, name)], dtype=dt, shape=shape, extra={"device": device},
        )  # fmt: skip
    control, ctl_name = None, None
    if kernel.role != "mutant":
        ctl, ctl_name = control_of(kernels, family, device, oracle)
        control = as_rows(ctl)
    rec = invariance.check(
        as_rows(configured(kernel, device)),
        pool.make,
        oracle=oracle,
        family=family,
        implementation=name,
        quantization=QUANT[dtype_name(device, name)],
        dtype=dt,
        shape=shape,
        control=control,
        control_name=ctl_name,
        expect=expect_for_length(kernel, length),
        batch_sizes=sizes,
        repeats=3 if device == "cpu" else None,
        trials=trials_of(invariance, device),
        extra=record_extra(device, length, oracle, pool.mixed),
    )
    if kernel.expect == "invariant" and rec["verdict"] == "divergent":
        # At one key the check is measured (vacuous is the honest verdict), but a
        # reference kernel that diverges even there is still a failure.
        invariance.expect_verdict(rec, "invariant")
