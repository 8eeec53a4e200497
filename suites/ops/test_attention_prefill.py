"""Attention prefill: does a sequence's prefill output depend on the rest of the batch?

Family ``attention-prefill``: every implementation in the registry (signatures in
``reference_kernels/attention/__init__.py``) x head configs (Llama-3-8B: 32 q / 8 KV heads,
d=128; an MHA config) x probe KV lengths across split boundaries x oracles:

- ``batch-size`` / ``batch-position``: a "row" is a sequence handle; the probe sequence alone
  vs among N sequences (mixed lengths for reference and mutants; same length for stock SDPA,
  whose flash backend takes no mask).
- ``run-to-run``: the same batch repeated.
- ``chunking``: whole prefill vs chunked prefill (each chunk against prefix + chunk), chunk
  sizes aligned and not aligned to the split size.

Reference: ``invariant``; stock: measured; ``mutant:splitkv-prefill`` (split count from batch and
SM count): ``divergent``, and the named positive control of every other check. The cases (CPU: tiny
heads, split size 16; CUDA: the real shapes, ``SPLIT_SIZE``) are in ``_attention_cases``; decode and
the prefill-decode oracle are in ``test_attention_decode``.
"""

from __future__ import annotations

import pytest
from pytest_invariance.oracles.vocabulary import OP_ORACLES as ORACLES
from pytest_invariance.oracles.vocabulary import QUANTIZATION_OF_DTYPE as QUANT

from ._attention_cases import (
    CONTROL,
    attention_params,
    chunk_sizes,
    dtype_name,
    expect_for_length,
    heads_of,
    kernels_of,
    one_cpu_thread,  # noqa: F401 - autouse fixture
    record_extra,
    record_shape,
    skip_unavailable,
    trials_of,
)
from ._attention_runs import (
    check_attention,
    configured,
    cu_seqlens,
    prefill_rows,
    refusal,
    run_prefill,
    sequence,
    skip_unsupported,
)

torch = pytest.importorskip("torch")


@pytest.mark.family("attention-prefill")
@pytest.mark.parametrize(
    ("device", "name", "cfg", "length", "oracle"), attention_params("attention-prefill", ORACLES)
)
def test_attention_prefill(invariance, device, name, cfg, length, oracle):
    check_attention(invariance, "attention-prefill", device, name, cfg, length, oracle, prefill_rows)


@pytest.mark.family("attention-prefill")
@pytest.mark.parametrize(
    ("device", "name", "cfg", "length", "oracle"), attention_params("attention-prefill", ("chunking",))
)
def test_attention_chunking(invariance, device, name, cfg, length, oracle):
    skip_unavailable(device, name)
    if length < 2:
        pytest.skip("a 1-token prompt has no chunking")
    kernels = {k.name: k for k in kernels_of("attention-prefill", device)}
    kernel = kernels[name]
    heads, dt = heads_of(device, cfg), getattr(torch, dtype_name(device, name))

    def chunked(fn):
        def run(chunk: int | None, seed: int = 0) -> torch.Tensor:
            q, k, v = sequence(seed, length, heads, dt, device)
            if chunk is None:
                return run_prefill(fn, [(q, k, v)])[0]
            outs = []
            for a in range(0, length, chunk):
                b = min(length, a + chunk)
                cu_q = cu_seqlens([b - a], device)
                cu_k = cu_seqlens([b], device)
                outs.append(fn(q[a:b], k[:b], v[:b], cu_q, cu_k, causal=True))
            return torch.cat(outs)

        return run

    def whole_and_smallest_chunk() -> None:  # the chunks take another SDPA path (a lower-right mask)
        chunked(kernel.fn)(None, invariance.seed)
        chunked(kernel.fn)(min(chunk_sizes(device, length)), invariance.seed)

    skip_unsupported(
        invariance, refusal(whole_and_smallest_chunk), family="attention-prefill",
        implementation=name, oracle=oracle, quantization=QUANT[dtype_name(device, name)], dtype=dt,
        shape=record_shape(cfg, heads, length, device), extra={"device": device},
    )  # fmt: skip
    ctl_name = CONTROL["attention-prefill"]
    control = None if kernel.role == "mutant" else chunked(configured(kernels[ctl_name], device))
    invariance.chunking(
        chunked(configured(kernel, device)),
        chunk_sizes(device, length),
        family="attention-prefill",
        implementation=name,
        quantization=QUANT[dtype_name(device, name)],
        dtype=dt,
        shape=record_shape(cfg, heads, length, device),
        control=control,
        control_name=None if control is None else ctl_name,
        expect=expect_for_length(kernel, length),
        trials=trials_of(invariance, device),
        extra=record_extra(device, length, "chunking", chunk_sizes_vs_split="aligned and unaligned"),
    )


def test_backend_refusal_is_recorded_unsupported_and_skipped(invariance):
    """A backend that declines the inputs yields an ``unsupported`` record, never a failure."""

    def refuse():
        raise RuntimeError("No available kernel. Aborting execution.")

    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    assert refusal(lambda: None) is None
    with pytest.raises(RuntimeError, match="illegal memory access"):
        refusal(broken)  # any other error is a real failure
    with pytest.raises(pytest.skip.Exception, match="No available kernel"):
        skip_unsupported(invariance, refusal(refuse), family="attention-prefill", implementation="torch-sdpa-x",
                          oracle="batch-size", quantization="bf16", shape={"kv_len": 1})  # fmt: skip
    rec = invariance.records[-1]
    assert rec["verdict"] == "unsupported" and "No available kernel" in rec["evidence"]["error"]
    invariance.records.clear()  # a demonstration, not a measurement
