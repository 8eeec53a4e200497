"""Block-wise FP8 GEMM (DeepSeek-V3): is a token's bf16 output independent of its batch?

Family ``fp8-block-gemm`` (``fn(x[M, K], w_fp8[N, K], w_scale[N/128, K/128]) -> bf16``; the kernel
quantizes each token in 1x128 groups itself): stock dequantize + ``F.linear``, stock
``F.scaled_mm`` with block recipes (CUDA sm90+; ``unsupported`` where it cannot run or cuBLASLt
refuses it at its first call, as on torch 2.11+cu130 / H200), the
reference, the small-batch split-K mutant and registered kernels x layers x batch-size,
batch-position and run-to-run. The CPU shape has N = 320 (a partial weight block). Controls:
``mutant:fp8-block-splitk`` (batch oracles), its split chosen per call (run-to-run).
"""

from __future__ import annotations

from functools import lru_cache

import pytest
from pytest_invariance.oracles.vocabulary import FP8_BLOCK

from ._familysuite import params
from ._quantgemm import GROUP, gemm_variants, record_unsupported, run_gemm_check, shape

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("fp8-block-gemm")

FAMILY = "fp8-block-gemm"
CPU_SHAPE = shape("tiny", "partial-block", 512, 320)
CUDA_SHAPES = [shape("deepseek-v3", "q_a", 7168, 1536), shape("deepseek-v3", "kv_a", 7168, 576),
               shape("deepseek-v3", "down", 18432, 7168), shape("llama3-8b", "qkv", 4096, 6144)]  # fmt: skip


@lru_cache(maxsize=2)
def _weight(n: int, k: int, device: str):
    from pytest_invariance.reference_kernels.fp8_block import quantize_weight_blocks

    from ._gemmsuite import wide

    return quantize_weight_blocks(wide((n, k), 7, device))


@pytest.mark.parametrize(("device", "name", "quant", "shp", "oracle"),
                         params(GROUP, FAMILY, gemm_variants(FP8_BLOCK, CPU_SHAPE, CUDA_SHAPES)))  # fmt: skip
def test_fp8_block_gemm(invariance, device, name, quant, shp, oracle):
    from pytest_invariance.reference_kernels.fp8_block import scaled_mm_blockwise_unavailable
    from pytest_invariance.reference_kernels.mutants.quant_gemm_mutants import fp8_block_splitk

    if name == "torch-scaled-mm" and record_unsupported(invariance, FAMILY, name, oracle, quant, shp,
                                                         scaled_mm_blockwise_unavailable(device)):  # fmt: skip
        return
    run_gemm_check(invariance, FAMILY, device, name, quant, shp, oracle, _weight(shp["N"], shp["K"], device),
                   fp8_block_splitk, "mutant:fp8-block-splitk", {"activation": "1x128 groups", "weight": "128x128 blocks"})  # fmt: skip
