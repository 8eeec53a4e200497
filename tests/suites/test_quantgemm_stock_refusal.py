"""A quantized-GEMM stock the installed library refuses at its first call (cuBLASLt's heuristic
``CUBLAS_STATUS_NOT_SUPPORTED``, as block-scaled F.scaled_mm on torch 2.11+cu130 / H200) is recorded
``unsupported`` with the error's one-line cause; any other error of a stock still fails its test."""

from __future__ import annotations

import json

import pytest
from pytest_invariance.reference_kernels.device import library_refusal

REFUSAL = ("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmulAlgoGetHeuristic( ltHandle, "
           "computeDesc.descriptor(), preference.descriptor(), 1, &heuristicResult, &returnedResult)`\n"
           "CUDA kernel errors might be asynchronously reported")  # fmt: skip

SUITE = '''
import pytest
from pytest_invariance.reference_kernels.fp8_block import quantize_weight_blocks
from pytest_invariance.reference_kernels.mutants.quant_gemm_mutants import fp8_block_splitk
from pytest_invariance.reference_kernels.registry import register, unregister
from pytest_invariance.suites.ops._familysuite import kernels_of
from pytest_invariance.suites.ops._quantgemm import GROUP, run_gemm_check, shape
import torch

FAMILY = "fp8-block-gemm"

def planted_stock(message):
    def fn(x, w, s):  # fault injection: the stock's library refuses (or breaks) at its first call
        raise RuntimeError(message)
    return fn

@pytest.mark.parametrize("name, message", [("planted-refused", REFUSAL_MESSAGE), ("planted-broken", "CUDA error: illegal memory access")])
def test_stock(invariance, name, message):
    kernels_of(GROUP, FAMILY, "cpu")  # the built-ins first, so the planted rows stay
    register(FAMILY, name, planted_stock(message), role="stock", devices=("cpu",))
    try:
        w = quantize_weight_blocks(torch.randn(128, 256))
        run_gemm_check(invariance, FAMILY, "cpu", name, "fp8-e4m3-block128", shape("tiny", "t", 256, 128),
                       "batch-size", w, fp8_block_splitk, "mutant:fp8-block-splitk", {})
    finally:
        unregister(FAMILY, name)
'''.replace("REFUSAL_MESSAGE", repr(REFUSAL))


def test_library_refusal_is_the_one_line_cause_and_other_errors_propagate():
    def refused():
        raise RuntimeError(REFUSAL)

    assert library_refusal(refused) == f"RuntimeError: {REFUSAL.splitlines()[0]}"
    assert library_refusal(lambda: None) is None
    with pytest.raises(RuntimeError, match="illegal memory access"):
        library_refusal(lambda: (_ for _ in ()).throw(RuntimeError("CUDA error: illegal memory access")))
    with pytest.raises(ValueError):
        library_refusal(lambda: (_ for _ in ()).throw(ValueError("CUBLAS_STATUS_NOT_SUPPORTED")))


def test_a_refused_stock_is_an_unsupported_record_with_the_reason_and_a_broken_one_fails(pytester):
    pytester.makepyfile(test_stock=SUITE)
    out = pytester.path / "rec.jsonl"
    result = pytester.runpytest("-p", "no:cacheprovider", "-o", "invariance_power=off", f"--invariance-records={out}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*planted-broken*illegal memory access*"])
    recs = {r["implementation"]: r for r in map(json.loads, out.read_text().splitlines())}
    refused = recs["planted-refused"]
    assert refused["verdict"] == "unsupported" and refused["oracle"] == "batch-size"
    assert refused["extra"]["reason"] == f"RuntimeError: {REFUSAL.splitlines()[0]}"
    assert refused["shape"] == {"model": "tiny", "layer": "t", "K": 256, "N": 128}
    assert recs.get("planted-broken", {}).get("verdict") != "unsupported"
