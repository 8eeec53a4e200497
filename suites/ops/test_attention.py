"""Attention: does a sequence's attention output depend on the rest of the batch?

Families ``attention-prefill`` and ``attention-decode``, every implementation in the
registry (signatures in ``reference_kernels/attention/__init__.py``) x head configs
(Llama-3-8B: 32 q / 8 KV heads, d=128; an MHA config) x probe KV lengths across split
boundaries x oracles:

- ``batch-size`` / ``batch-position``: a "row" is a sequence handle; the probe
  sequence alone vs among N sequences (mixed lengths for reference and mutants; same
  length for stock SDPA, whose flash backend takes no mask). Decode caches are built per
  batch, so the probe's physical blocks also move with the batch.
- ``run-to-run``: the same batch repeated.
- ``chunking``: whole prefill vs chunked prefill (each chunk against prefix + chunk),
  chunk sizes aligned and not aligned to the split size.
- ``prefill-decode``: decode at position t (cache written first) vs prefill at t.

Reference: ``invariant``; stock: measured; mutants (``mutant:splitkv-decode``,
``mutant:splitkv-prefill``, split count from batch and SM count): ``divergent``. They
are also the named positive controls of every other check. CPU (CI) runs tiny heads with
split size 16 so that lengths straddle split edges in milliseconds; CUDA runs the real
shapes with the reference's split size (``SPLIT_SIZE``, 1024).
"""

from __future__ import annotations

import functools
import os

import pytest
from pytest_invariance.oracles.vocabulary import OP_ORACLES as ORACLES
from pytest_invariance.oracles.vocabulary import QUANTIZATION_OF_DTYPE as QUANT

torch = pytest.importorskip("torch")
from pytest_invariance.reference_kernels.attention import SPLIT_SIZE  # noqa: E402 - needs torch

HEADS = {"llama3-8b": (32, 8, 128), "mha-32x128": (32, 32, 128)}
CPU_HEADS = {"llama3-8b": (8, 2, 16), "mha-32x128": (4, 4, 16)}  # same GQA ratios, tiny
GPU_SPLIT, CPU_SPLIT = SPLIT_SIZE, 16  # the split the engine runs on CUDA; tiny on CPU
GPU_LENGTHS = (1, 257, 1023, 1024, 1025, 4096, 8192)  # split edges
CPU_LENGTHS = (1, 15, 17, 40)
CPU_STOCK_LENGTHS = (17,)  # stock on CPU: one length across a split edge (CI time)
CPU_SIZES = (1, 2, 3, 9)
CPU_TRIALS = 2
PAGE = 16
# Tiny CPU lengths and a small SM budget, so that the heuristic's split count moves with the batch.
CPU_MUTANT_KW = {"min_keys": 4, "sm_count": 8}
CONTROL = {"attention-prefill": "mutant:splitkv-prefill", "attention-decode": "mutant:splitkv-decode"}


@pytest.fixture(autouse=True)
def _one_cpu_thread():
    """Intra-op threads off while these tiny CPU shapes run (restored after).

    The reference path is element-wise, so its bits do not depend on the thread
    count; but on a loaded 2-core CI box under xdist, two workers x two threads spin
    on tensors of a few thousand elements and run ~20x slower.
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _kernels(family: str, device: str):
    from pytest_invariance.reference_kernels.catalogue import register_builtin
    from pytest_invariance.reference_kernels.registry import kernels

    register_builtin("attention")
    return kernels(family, device)


def _dtype(device: str, name: str) -> str:
    # CPU: fp32 (the Triton interpreter's bf16 dots are wrong, and fp16 outputs round
    # the mutant's fp32 split differences away at these tiny shapes).
    return "bfloat16" if device == "cuda" else "float32"


def _lengths(device: str, name: str) -> tuple[int, ...]:
    if device == "cuda":
        return GPU_LENGTHS
    if name == "reference-triton":
        return (17,)
    return CPU_STOCK_LENGTHS if name.startswith("torch") else CPU_LENGTHS


def _params(family: str, oracles: tuple[str, ...]) -> list:
    out = []
    for device in ("cpu", "cuda"):
        marks = [pytest.mark.gpu] if device == "cuda" else []
        for k in _kernels(family, device):
            for cfg in HEADS:
                if device == "cpu" and k.role == "stock" and cfg != "llama3-8b":
                    continue
                if device == "cpu" and k.name == "reference-triton" and cfg != "llama3-8b":
                    continue  # the interpreter is slow: one config
                for length in _lengths(device, k.name):
                    if device == "cpu" and cfg != "llama3-8b" and length != 17:
                        continue  # CI time: the MHA config at one length on CPU
                    if k.role == "mutant" and length == 1:
                        continue  # one key: no split to move, nothing to diverge
                    for oracle in oracles:
                        if device == "cpu" and k.name == "reference-triton" and oracle == "batch-position":
                            continue  # interpreter time; batch-size covers the batch on CPU
                        if k.role == "mutant" and oracle == "run-to-run":
                            continue  # deterministic by design: it diverges with the batch only
                        dt = _dtype(device, k.name)
                        out.append(
                            pytest.param(
                                device,
                                k.name,
                                cfg,
                                length,
                                oracle,
                                marks=[*marks, pytest.mark.quant(QUANT[dt])],
                                id=f"{device}-{k.name}-{cfg}-L{length}-{oracle}",
                            )  # fmt: skip
                        )
    return out


def _heads(device: str, cfg: str) -> tuple[int, int, int]:
    return (HEADS if device == "cuda" else CPU_HEADS)[cfg]


def _split(device: str) -> int:
    return GPU_SPLIT if device == "cuda" else CPU_SPLIT


ONE_KEY = "one key: the softmax weight is exactly 1, so any schedule returns v"


def _expect(kernel, length: int) -> str:
    """One key: every implementation returns v exactly, so no control can diverge (vacuous); measure it."""
    return "measure" if length == 1 and kernel.expect == "invariant" else kernel.expect


ONE_KEY_ORACLES = ("batch-size", "batch-position", "chunking", "prefill-decode")


def _extra(device: str, length: int, oracle: str, mixed: bool = False, **more) -> dict:
    """Record extras; at one key a probe-row oracle declares why it is vacuous (the matrix names it apart).

    Run-to-run compares the whole batch: trivial only when every sequence has one key (not ``mixed``).
    """
    trivial = length == 1 and (oracle in ONE_KEY_ORACLES or not mixed)
    return {"device": device, **({"vacuous_by_construction": ONE_KEY} if trivial else {}), **more}


def _control(kernels: dict, family: str, device: str, oracle: str):
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
    return _fn(kernels[name], device), name


def _fn(kernel, device: str):
    """The kernel with the suite's split size (reference) or CPU heuristic scale (mutants)."""
    if kernel.role == "reference":
        return functools.partial(kernel.fn, split_size=_split(device))
    if kernel.role == "mutant" and device == "cpu":
        return functools.partial(kernel.fn, **CPU_MUTANT_KW)
    return kernel.fn


def _seq(seed: int, length: int, heads, dtype, device):
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
        self.split = _split(device)
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
            _seq(seed * 1000 + 3 * i, L, self.heads, self.dtype, self.device) for i, L in enumerate(lens)
        ]
        return torch.arange(self.n, dtype=torch.int64)[:, None]

    def pad(self, outs: list[torch.Tensor]) -> torch.Tensor:
        """Per-sequence outputs [L, H, D] zero-padded to the pool's longest, stacked."""
        lmax = max(s[0].shape[0] for s in self.seqs)
        full = torch.zeros((len(outs), lmax, *outs[0].shape[1:]), dtype=outs[0].dtype, device=outs[0].device)
        for i, o in enumerate(outs):
            full[i, : o.shape[0]] = o
        return full


def _cu(lengths: list[int], device) -> torch.Tensor:
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
    cu = _cu(lens, q.device)
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


def _sizes(invariance, device: str, length: int) -> list[int]:
    if device == "cpu":
        return list(CPU_SIZES)
    return invariance.batch_sizes(limit=9 if length >= 4096 else 33)


def _trials(invariance, device: str) -> int:
    return min(invariance.trials, CPU_TRIALS) if device == "cpu" else invariance.trials


def _skip_unavailable(device: str, name: str) -> None:
    if name == "reference-triton" and not _interpreting():
        pytest.skip("reference-triton runs under TRITON_INTERPRET=1 only")


def _refusal(call) -> str | None:
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


def _skip_unsupported(invariance, reason: str | None, **fields) -> None:
    """Record ``unsupported`` (with the backend's words) and skip; no-op when ``reason`` is None."""
    if reason is None:
        return
    from pytest_invariance.oracles.verdict import UNSUPPORTED

    invariance.record(
        verdict=UNSUPPORTED, contract="bitwise", evidence={"error": reason}, seed=invariance.seed,
        trials=0, profile=invariance.profile, **fields,
    )  # fmt: skip
    pytest.skip(f"{fields.get('implementation')}: {reason}")


def _prefill_rows(fn, pool: Pool, rows: torch.Tensor) -> torch.Tensor:
    """Prefill of the pool sequences named by ``rows[:, 0]``, padded to one batch."""
    return pool.pad(run_prefill(fn, [pool.seqs[int(i)] for i in rows[:, 0]]))


def _decode_rows(fn, pool: Pool, rows: torch.Tensor) -> torch.Tensor:
    """Decode step of each pool sequence named by ``rows[:, 0]`` (query = last token)."""
    seqs = [pool.seqs[int(i)] for i in rows[:, 0]]
    lens = [s[0].shape[0] for s in seqs]
    return run_decode(fn, [s[0][-1] for s in seqs], [s[1] for s in seqs], [s[2] for s in seqs], lens)


def _check_attention(
    invariance, family: str, device: str, name: str, cfg: str, length: int, oracle: str, run_rows
) -> None:
    """One attention check; prefill and decode differ only in how a batch of rows runs."""
    _skip_unavailable(device, name)
    kernels = {k.name: k for k in _kernels(family, device)}
    kernel = kernels[name]
    heads, dt = _heads(device, cfg), getattr(torch, _dtype(device, name))
    sizes = _sizes(invariance, device, length)
    pool = Pool(heads, dt, device, length, max(sizes), mixed=kernel.role != "stock")

    def as_rows(fn):
        def run(rows: torch.Tensor) -> torch.Tensor:
            return run_rows(fn, pool, rows)

        return run

    shape = _shape(cfg, heads, length, device, pool.mixed)
    if kernel.role == "stock":
        pool.make(invariance.seed)
        alone, whole = torch.zeros((1, 1), dtype=torch.int64), torch.arange(pool.n, dtype=torch.int64)[:, None]

        def both_ends() -> None:  # the probe alone and the largest batch (backends refuse by shape)
            run_rows(kernel.fn, pool, alone)
            run_rows(kernel.fn, pool, whole)

        _skip_unsupported(
            invariance, _refusal(both_ends), family=family, implementation=name,
            oracle=oracle, quantization=QUANT[_dtype(device, name)], dtype=dt, shape=shape, extra={"device": device},
        )  # fmt: skip
    control, ctl_name = None, None
    if kernel.role != "mutant":
        ctl, ctl_name = _control(kernels, family, device, oracle)
        control = as_rows(ctl)
    rec = invariance.check(
        as_rows(_fn(kernel, device)),
        pool.make,
        oracle=oracle,
        family=family,
        implementation=name,
        quantization=QUANT[_dtype(device, name)],
        dtype=dt,
        shape=shape,
        control=control,
        control_name=ctl_name,
        expect=_expect(kernel, length),
        batch_sizes=sizes,
        repeats=3 if device == "cpu" else None,
        trials=_trials(invariance, device),
        extra=_extra(device, length, oracle, pool.mixed),
    )
    if kernel.expect == "invariant" and rec["verdict"] == "divergent":
        # At one key the check is measured (vacuous is the honest verdict), but a
        # reference kernel that diverges even there is still a failure.
        invariance.expect_verdict(rec, "invariant")


@pytest.mark.family("attention-prefill")
@pytest.mark.parametrize(("device", "name", "cfg", "length", "oracle"), _params("attention-prefill", ORACLES))
def test_attention_prefill(invariance, device, name, cfg, length, oracle):
    _check_attention(invariance, "attention-prefill", device, name, cfg, length, oracle, _prefill_rows)


@pytest.mark.family("attention-decode")
@pytest.mark.parametrize(("device", "name", "cfg", "length", "oracle"), _params("attention-decode", ORACLES))
def test_attention_decode(invariance, device, name, cfg, length, oracle):
    _check_attention(invariance, "attention-decode", device, name, cfg, length, oracle, _decode_rows)


def _shape(cfg: str, heads, length: int, device: str, mixed: bool | None = None) -> dict:
    hq, hkv, d = heads
    s = {
        "model": cfg,
        "Hq": hq,
        "Hkv": hkv,
        "D": d,
        "kv_len": length,
        "split_size": _split(device),
        "page": PAGE,
    }
    if mixed is not None:
        s["neighbours"] = "mixed lengths" if mixed else "same length"
    return s


def _chunk_sizes(device: str, length: int) -> list[int]:
    s = _split(device)
    return sorted({c for c in (s, s // 2 + 1, 3 * s, 7) if c < length}) or [1]


@pytest.mark.family("attention-prefill")
@pytest.mark.parametrize(
    ("device", "name", "cfg", "length", "oracle"), _params("attention-prefill", ("chunking",))
)
def test_attention_chunking(invariance, device, name, cfg, length, oracle):
    _skip_unavailable(device, name)
    if length < 2:
        pytest.skip("a 1-token prompt has no chunking")
    kernels = {k.name: k for k in _kernels("attention-prefill", device)}
    kernel = kernels[name]
    heads, dt = _heads(device, cfg), getattr(torch, _dtype(device, name))

    def chunked(fn):
        def run(chunk: int | None, seed: int = 0) -> torch.Tensor:
            q, k, v = _seq(seed, length, heads, dt, device)
            if chunk is None:
                return run_prefill(fn, [(q, k, v)])[0]
            outs = []
            for a in range(0, length, chunk):
                b = min(length, a + chunk)
                cu_q = _cu([b - a], device)
                cu_k = _cu([b], device)
                outs.append(fn(q[a:b], k[:b], v[:b], cu_q, cu_k, causal=True))
            return torch.cat(outs)

        return run

    def whole_and_smallest_chunk() -> None:  # the chunks take another SDPA path (a lower-right mask)
        chunked(kernel.fn)(None, invariance.seed)
        chunked(kernel.fn)(min(_chunk_sizes(device, length)), invariance.seed)

    _skip_unsupported(
        invariance, _refusal(whole_and_smallest_chunk), family="attention-prefill",
        implementation=name, oracle=oracle, quantization=QUANT[_dtype(device, name)], dtype=dt,
        shape=_shape(cfg, heads, length, device), extra={"device": device},
    )  # fmt: skip
    ctl_name = CONTROL["attention-prefill"]
    control = None if kernel.role == "mutant" else chunked(_fn(kernels[ctl_name], device))
    invariance.chunking(
        chunked(_fn(kernel, device)),
        _chunk_sizes(device, length),
        family="attention-prefill",
        implementation=name,
        quantization=QUANT[_dtype(device, name)],
        dtype=dt,
        shape=_shape(cfg, heads, length, device),
        control=control,
        control_name=None if control is None else ctl_name,
        expect=_expect(kernel, length),
        trials=_trials(invariance, device),
        extra=_extra(device, length, "chunking", chunk_sizes_vs_split="aligned and unaligned"),
    )


def _pd_params() -> list:
    out = []
    for device in ("cpu", "cuda"):
        marks = [pytest.mark.gpu] if device == "cuda" else []
        pre = {k.name: k for k in _kernels("attention-prefill", device)}
        for k in _kernels("attention-decode", device):
            if k.name not in pre or k.role == "mutant":
                continue
            for cfg in HEADS:
                if device == "cpu" and k.role == "stock" and cfg != "llama3-8b":
                    continue
                for length in _lengths(device, k.name):
                    dt = _dtype(device, k.name)
                    out.append(
                        pytest.param(
                            device,
                            k.name,
                            cfg,
                            length,
                            marks=[*marks, pytest.mark.quant(QUANT[dt])],
                            id=f"{device}-{k.name}-{cfg}-L{length}-prefill-decode",
                        )  # fmt: skip
                    )
    return out


def _decode_positions(length: int, split: int) -> list[int]:
    return sorted({p for p in (0, split - 1, split, length // 2, length - 1) if 0 <= p < length})


@pytest.mark.family("attention-decode")
@pytest.mark.parametrize(("device", "name", "cfg", "length"), _pd_params())
def test_attention_prefill_decode(invariance, device, name, cfg, length):
    """Decode at position t (cache written first) vs prefill output at t, for several t."""
    from pytest_invariance.oracles import verdict as V
    from pytest_invariance.oracles.batch import OracleResult, Point
    from pytest_invariance.oracles.compare import compare

    _skip_unavailable(device, name)
    pre = {k.name: k for k in _kernels("attention-prefill", device)}
    dec = {k.name: k for k in _kernels("attention-decode", device)}
    heads, dt = _heads(device, cfg), getattr(torch, _dtype(device, name))
    f_pre, f_dec = _fn(pre[name], device), _fn(dec[name], device)
    ctl_name = CONTROL["attention-decode"]
    f_ctl = _fn(dec[ctl_name], device)
    positions = _decode_positions(length, _split(device))

    def oracle(decode_fn) -> OracleResult:
        res = OracleResult("prefill-decode", "bitwise")
        for t in range(_trials(invariance, device)):
            q, k, v = _seq(invariance.seed + t, length, heads, dt, device)
            whole = run_prefill(f_pre, [(q, k, v)])[0]
            for p in positions:
                d = run_decode(decode_fn, [q[p]], [k], [v], [p + 1])[0]
                res.add(Point(None, p, t, compare(whole[p], d), label=f"position {p}"))
            res.trials += 1
        return res

    # Some backends refuse particular lengths (cuDNN at some decode positions): the whole
    # oracle runs inside the refusal check, and a refusal is recorded as unsupported.
    held: dict = {}
    _skip_unsupported(
        invariance, _refusal(lambda: held.setdefault("result", oracle(f_dec))), family="attention-decode",
        implementation=name, oracle="prefill-decode", quantization=QUANT[_dtype(device, name)], dtype=dt,
        shape={**_shape(cfg, heads, length, device), "positions": positions}, extra={"device": device},
    )  # fmt: skip
    result = held["result"]
    control = oracle(f_ctl)
    verdict = V.decide(result.diverged, control.diverged)
    rec = invariance.record(
        family="attention-decode",
        implementation=name,
        oracle="prefill-decode",
        verdict=verdict,
        quantization=QUANT[_dtype(device, name)],
        dtype=dt,
        shape={**_shape(cfg, heads, length, device), "positions": positions},
        contract=result.contract,
        evidence=result.evidence(),
        control={"name": ctl_name, "diverged": control.diverged, "evidence": control.evidence()},
        seed=invariance.seed,
        trials=result.trials,
        profile=invariance.profile,
        extra=_extra(device, length, "prefill-decode", summary=result.describe(), expect=dec[name].expect,
                     prefill=f"{name} (attention-prefill)", decode=f"{name} (attention-decode)"),
    )  # fmt: skip
    invariance.expect_verdict(rec, _expect(dec[name], length))


def test_backend_refusal_is_recorded_unsupported_and_skipped(invariance):
    """A backend that declines the inputs yields an ``unsupported`` record, never a failure."""

    def refuse():
        raise RuntimeError("No available kernel. Aborting execution.")

    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    assert _refusal(lambda: None) is None
    with pytest.raises(RuntimeError, match="illegal memory access"):
        _refusal(broken)  # any other error is a real failure
    with pytest.raises(pytest.skip.Exception, match="No available kernel"):
        _skip_unsupported(invariance, _refusal(refuse), family="attention-prefill", implementation="torch-sdpa-x",
                          oracle="batch-size", quantization="bf16", shape={"kv_len": 1})  # fmt: skip
    rec = invariance.records[-1]
    assert rec["verdict"] == "unsupported" and "No available kernel" in rec["evidence"]["error"]
    invariance.records.clear()  # a demonstration, not a measurement
