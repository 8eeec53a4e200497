"""int4 weight-only GEMM (GPTQ/AWQ group 128): is a token's output independent of its batch?

Family ``int4-gemm`` (``fn(x[M, K] bf16, qweight int32[K/8, N], scales[K/128, N],
qzeros int32[K/128, N/8]) -> bf16``): stock dequantize + ``F.linear``, stock torch int4 kernel
(``_weight_int4pack_mm_for_cpu`` / tinygemm), the reference, the Marlin-style split-K-by-batch
mutant and registered kernels x layers x batch-size, batch-position and run-to-run. Controls:
``mutant:int4-splitk-by-batch`` (batch oracles), its split chosen per call (run-to-run).
"""

from __future__ import annotations

from functools import lru_cache

import pytest
from pytest_invariance.oracles.vocabulary import INT4_G128

from ._familysuite import params
from ._quantgemm import GROUP, gemm_variants, run_gemm_check, shape

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("int4-gemm")

FAMILY = "int4-gemm"
CPU_SHAPE = shape("tiny", "tiny", 512, 256)
CUDA_SHAPES = [shape("llama3-8b", "qkv", 4096, 6144), shape("llama3-8b", "down", 14336, 4096),
               shape("qwen2-0.5b", "o", 896, 896)]  # fmt: skip


@lru_cache(maxsize=2)
def _weight(n: int, k: int, device: str):
    from pytest_invariance.reference_kernels.int4 import quantize_int4

    from ._gemmsuite import wide

    return quantize_int4(wide((n, k), 7, device))


@pytest.mark.parametrize(("device", "name", "quant", "shp", "oracle"),
                         params(GROUP, FAMILY, gemm_variants(INT4_G128, CPU_SHAPE, CUDA_SHAPES)))  # fmt: skip
def test_int4_gemm(invariance, device, name, quant, shp, oracle):
    from pytest_invariance.reference_kernels.mutants.quant_gemm_mutants import int4_splitk_by_batch

    run_gemm_check(invariance, FAMILY, device, name, quant, shp, oracle, _weight(shp["N"], shp["K"], device),
                   int4_splitk_by_batch, "mutant:int4-splitk-by-batch", {"layout": "GPTQ, group 128, asymmetric"})  # fmt: skip
