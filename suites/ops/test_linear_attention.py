"""Linear-attention / SSM scan: does a sequence's output depend on its batch, on how its prefill
was chunked, or on whether a token came from prefill or decode?

Family ``linear-attention`` (``fn(q, k, v, g, state=None) -> (o, state)``, Mamba-2 SSD's scalar
gate): stock chunked scan (recurrent decode), the reference recurrence, the chunk-by-batch
mutant and registered kernels x batch-size, batch-position, run-to-run (a row is one sequence:
q, k, v in bf16, g fp32; the output row is o's bits then the final state's), ``chunking`` (the
whole prefill vs prefills in chunks of c tokens carrying the state: o and the final state) and
``prefill-decode`` (the last tokens decoded one at a time from the prefill's state vs the whole
prefill). Control: ``mutant:scan-chunk-by-batch`` (its regime per call for run-to-run).
"""

from __future__ import annotations

import pytest
from pytest_invariance.oracles.vocabulary import CHUNKING, OP_ORACLES, PREFILL_DECODE

from ._familysuite import (
    bits_row,
    expect_of,
    is_interpreted,
    kernel_named,
    params,
    record_shape,
    sizes,
    trials,
)

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("linear-attention")

GROUP, FAMILY = "scan", "linear-attention"
CPU_SIZES = (1, 2, 3, 5, 8, 9)
SHAPES = {"cpu": [{"label": "T64-H2-d16", "T": 64, "H": 2, "DK": 16, "DV": 16}],
          "cuda": [{"label": "qwen3-next-T1024-H16-d128", "T": 1024, "H": 16, "DK": 128, "DV": 128},
                   {"label": "mamba2-T512-H8-d64", "T": 512, "H": 8, "DK": 64, "DV": 64}]}  # fmt: skip
INTERPRET_SHAPE = {"label": "tiny", "T": 12, "H": 1, "DK": 8, "DV": 8}
CHUNKS = {"cpu": [16, 24, 40], "cuda": [256, 300, 500], "interpret": [4, 5]}
DECODE_TOKENS = {"cpu": 4, "cuda": 8, "interpret": 3}
ORACLES = (*OP_ORACLES, CHUNKING, PREFILL_DECODE)


def _variants(device: str, kernel):
    shapes = [INTERPRET_SHAPE] if is_interpreted(device, kernel.name) else SHAPES[device]
    return [("bf16", "bf16", s) for s in shapes]


def _where(device: str, name: str) -> str:
    return "interpret" if is_interpreted(device, name) else device


def _seqs(b: int, shp: dict, seed: int, device: str):
    """q, k, v (bf16) and g (fp32 log decay in [-0.3, -0.01]) of ``b`` sequences."""
    from ._gemmsuite import wide

    t, h, dk, dv = shp["T"], shp["H"], shp["DK"], shp["DV"]
    q = wide((b, t, h, dk), seed, device, torch.bfloat16)
    k = (wide((b, t, h, dk), seed + 1, device) * dk**-0.5).to(torch.bfloat16)
    v = wide((b, t, h, dv), seed + 2, device, torch.bfloat16)
    g = -(torch.rand((b, t, h), generator=torch.Generator().manual_seed(seed + 3)) * 0.29 + 0.01)
    return q, k, v, g.to(device)


def _pack(shp: dict, q, k, v, g) -> torch.Tensor:
    b = q.shape[0]
    return torch.cat([q.float().reshape(b, -1), k.float().reshape(b, -1), v.float().reshape(b, -1), g.reshape(b, -1)], 1)


def as_rows(fn, shp: dict):
    t, h, dk, dv = shp["T"], shp["H"], shp["DK"], shp["DV"]
    cuts = [t * h * dk, t * h * dk, t * h * dv, t * h]

    def run(rows: torch.Tensor) -> torch.Tensor:
        b = rows.shape[0]
        q, k, v, g = rows.split(cuts, dim=1)
        o, s = fn(q.reshape(b, t, h, dk).to(torch.bfloat16), k.reshape(b, t, h, dk).to(torch.bfloat16),
                  v.reshape(b, t, h, dv).to(torch.bfloat16), g.reshape(b, t, h).contiguous())  # fmt: skip
        return bits_row(o, s)

    return run


def chunked(fn, shp: dict, device: str, b: int = 2):
    def run(chunk: int | None, seed: int = 0) -> torch.Tensor:
        q, k, v, g = _seqs(b, shp, seed, device)
        if chunk is None:
            return bits_row(*fn(q, k, v, g))
        outs, s = [], None
        for lo in range(0, shp["T"], chunk):
            o, s = fn(q[:, lo : lo + chunk], k[:, lo : lo + chunk], v[:, lo : lo + chunk], g[:, lo : lo + chunk], s)
            outs.append(o)
        return bits_row(torch.cat(outs, dim=1), s)

    return run


def prefill_decode(fn, shp: dict, device: str, n_trials: int, seed: int, d: int, b: int = 2):
    from pytest_invariance.oracles.batch import OracleResult, Point
    from pytest_invariance.oracles.compare import compare

    res, t = OracleResult(PREFILL_DECODE, "bitwise"), shp["T"]
    for tr in range(n_trials):
        q, k, v, g = _seqs(b, shp, seed + tr, device)
        whole, s_whole = fn(q, k, v, g)
        _, s = fn(q[:, : t - d], k[:, : t - d], v[:, : t - d], g[:, : t - d])
        for p in range(t - d, t):
            o, s = fn(q[:, p : p + 1], k[:, p : p + 1], v[:, p : p + 1], g[:, p : p + 1], s)
            res.add(Point(None, p, tr, compare(bits_row(whole[:, p]), bits_row(o[:, 0])), label=f"position {p}"))
        res.add(Point(None, t - 1, tr, compare(bits_row(s_whole), bits_row(s)), label="final state"))
        res.trials += 1
    return res


@pytest.mark.parametrize(("device", "name", "quant", "shp", "oracle"), params(GROUP, FAMILY, _variants, ORACLES))
def test_linear_attention(invariance, device, name, quant, shp, oracle):
    from functools import partial

    from pytest_invariance.reference_kernels.mutants.fused_norm_mutants import per_call
    from pytest_invariance.reference_kernels.mutants.scan_chunk import scan_chunk_by_batch

    from pytest_invariance.judge import Control, Observation, judge

    kernel = kernel_named(GROUP, FAMILY, device, name)
    where = _where(device, name)
    n_trials = trials(invariance, device, name)
    mutant = scan_chunk_by_batch
    if where == "interpret":  # 12 tokens there: the same mechanism with chunks of 4 and 6
        mutant = partial(scan_chunk_by_batch, small=4, large=6)
    control, control_name = mutant, "mutant:scan-chunk-by-batch"
    if oracle == "run-to-run":
        control, control_name = per_call(mutant, (1, 64)), control_name + "-per-call"
    common = dict(family=FAMILY, implementation=name, quantization=quant, dtype=torch.bfloat16,
                  shape=record_shape(shp), extra={"device": device, "gate": "scalar per head and token (SSD)"})  # fmt: skip
    expect = expect_of(kernel, oracle)
    if oracle in OP_ORACLES:
        batch = sizes(invariance, device, name, CPU_SIZES)
        if device == "cuda":
            batch = [s for s in batch if s <= 65]  # a row is a whole sequence of T tokens
        invariance.check(as_rows(kernel.fn, shp), lambda seed: _pack(shp, *_seqs(max(batch), shp, seed, device)),
                         oracle=oracle, control=as_rows(control, shp), control_name=control_name, batch_sizes=batch,
                         trials=n_trials, expect=expect, **common)  # fmt: skip
    elif oracle == CHUNKING:
        invariance.chunking(chunked(kernel.fn, shp, device), CHUNKS[where], control=chunked(control, shp, device),
                            control_name=control_name, trials=n_trials, expect=expect, **common)  # fmt: skip
    else:
        d = DECODE_TOKENS[where]
        sub = prefill_decode(kernel.fn, shp, device, n_trials, invariance.seed, d)
        con = prefill_decode(control, shp, device, n_trials, invariance.seed, d)
        judge(invariance, Observation(sub.diverged, sub.evidence(), sub.describe()),
              Control(control_name, Observation(con.diverged, con.evidence(), con.describe())),
              expect=expect, oracle=PREFILL_DECODE, contract=sub.contract, seed=invariance.seed, trials=sub.trials,
              profile=invariance.profile, **{**common, "extra": {**common["extra"], "decoded_tokens": d}})  # fmt: skip
