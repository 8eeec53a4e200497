"""Attention decode: does a sequence's decode step depend on the rest of the batch, and equal its prefill?

Family ``attention-decode``: every implementation in the registry x head configs x probe KV
lengths across split boundaries x oracles:

- ``batch-size`` / ``batch-position``: the probe sequence's decode step alone vs among N
  sequences. Paged caches are built per batch, so the probe's physical blocks also move with
  the batch.
- ``run-to-run``: the same batch repeated.
- ``prefill-decode``: decode at position t (cache written first) vs prefill at t, for several t
  around the split edges.

Reference: ``invariant``; stock: measured; ``mutant:splitkv-decode`` (split count from batch and
SM count): ``divergent``, and the named positive control of every other check. The cases are in
``_attention_cases``, the inputs and calls in ``_attention_runs``.
"""

from __future__ import annotations

import pytest
from pytest_invariance.oracles.vocabulary import OP_ORACLES as ORACLES
from pytest_invariance.oracles.vocabulary import QUANTIZATION_OF_DTYPE as QUANT

from ._attention_cases import (
    CONTROL,
    attention_params,
    decode_positions,
    dtype_name,
    expect_for_length,
    heads_of,
    kernels_of,
    one_cpu_thread,  # noqa: F401 - autouse fixture
    prefill_decode_params,
    record_extra,
    record_shape,
    skip_unavailable,
    split_of,
    trials_of,
)
from ._attention_runs import (
    check_attention,
    configured,
    decode_rows,
    refusal,
    run_decode,
    run_prefill,
    sequence,
    skip_unsupported,
)

torch = pytest.importorskip("torch")


@pytest.mark.family("attention-decode")
@pytest.mark.parametrize(
    ("device", "name", "cfg", "length", "oracle"), attention_params("attention-decode", ORACLES)
)
def test_attention_decode(invariance, device, name, cfg, length, oracle):
    check_attention(invariance, "attention-decode", device, name, cfg, length, oracle, decode_rows)


@pytest.mark.family("attention-decode")
@pytest.mark.parametrize(("device", "name", "cfg", "length"), prefill_decode_params())
def test_attention_prefill_decode(invariance, device, name, cfg, length):
    """Decode at position t (cache written first) vs prefill output at t, for several t."""
    from pytest_invariance.oracles import verdict as V
    from pytest_invariance.oracles.batch import OracleResult, Point
    from pytest_invariance.oracles.compare import compare

    skip_unavailable(device, name)
    pre = {k.name: k for k in kernels_of("attention-prefill", device)}
    dec = {k.name: k for k in kernels_of("attention-decode", device)}
    heads, dt = heads_of(device, cfg), getattr(torch, dtype_name(device, name))
    f_pre, f_dec = configured(pre[name], device), configured(dec[name], device)
    ctl_name = CONTROL["attention-decode"]
    f_ctl = configured(dec[ctl_name], device)
    positions = decode_positions(length, split_of(device))

    def oracle(decode_fn) -> OracleResult:
        res = OracleResult("prefill-decode", "bitwise")
        for t in range(trials_of(invariance, device)):
            q, k, v = sequence(invariance.seed + t, length, heads, dt, device)
            whole = run_prefill(f_pre, [(q, k, v)])[0]
            for p in positions:
                d = run_decode(decode_fn, [q[p]], [k], [v], [p + 1])[0]
                res.add(Point(None, p, t, compare(whole[p], d), label=f"position {p}"))
            res.trials += 1
        return res

    # Some backends refuse particular lengths (cuDNN at some decode positions): the whole
    # oracle runs inside the refusal check, and a refusal is recorded as unsupported.
    held: dict = {}
    skip_unsupported(
        invariance, refusal(lambda: held.setdefault("result", oracle(f_dec))), family="attention-decode",
        implementation=name, oracle="prefill-decode", quantization=QUANT[dtype_name(device, name)], dtype=dt,
        shape={**record_shape(cfg, heads, length, device), "positions": positions}, extra={"device": device},
    )  # fmt: skip
    result = held["result"]
    control = oracle(f_ctl)
    verdict = V.decide(result.diverged, control.diverged)
    rec = invariance.record(
        family="attention-decode",
        implementation=name,
        oracle="prefill-decode",
        verdict=verdict,
        quantization=QUANT[dtype_name(device, name)],
        dtype=dt,
        shape={**record_shape(cfg, heads, length, device), "positions": positions},
        contract=result.contract,
        evidence=result.evidence(),
        control={"name": ctl_name, "diverged": control.diverged, "evidence": control.evidence()},
        seed=invariance.seed,
        trials=result.trials,
        profile=invariance.profile,
        extra=record_extra(device, length, "prefill-decode", summary=result.describe(), expect=dec[name].expect,
                     prefill=f"{name} (attention-prefill)", decode=f"{name} (attention-decode)"),
    )  # fmt: skip
    invariance.expect_verdict(rec, expect_for_length(dec[name], length))
