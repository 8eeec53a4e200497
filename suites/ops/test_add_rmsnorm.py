"""Fused residual-add + RMSNorm: is a token's (normed, residual) pair independent of its batch?

Family ``add-rmsnorm`` (``fn(x, residual, weight, eps) -> (x, residual)``, in place as vLLM's
``fused_add_rms_norm``): stock torch (add then ``F.rms_norm``), the reference, the block-switch
mutant and any registered kernel x bf16/fp16/fp32 x hidden sizes x batch-size, batch-position and
run-to-run. The sweep crosses the 256-token edge where vLLM's kernel changes its block size
(vllm#48271: 255/256/257) on every device, and the full profile's edges on CUDA. A row of the
oracles is ``[x | residual]``; the output row is ``[normed x | new residual]``, both compared
bitwise. Controls: ``mutant:add-rmsnorm-block-switch`` (batch oracles) and the same mutant with
its regime changed per call (run-to-run).
"""

from __future__ import annotations

from functools import partial

import pytest
from pytest_invariance.oracles.vocabulary import QUANTIZATION_OF_DTYPE as QUANT

from ._familysuite import expect_of, is_interpreted, kernel_named, params, record_shape, sizes, trials

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("add-rmsnorm")

GROUP, FAMILY, EPS = "fused-norm", "add-rmsnorm", 1e-6
EDGES = (255, 256, 257)
CPU_SIZES = (1, 2, 8, *EDGES)
MODELS = {"cuda": (("llama3-8b", 4096), ("qwen2-0.5b", 896), ("deepseek-v3", 7168)), "cpu": (("tiny", 512),)}
# CPU: bf16 only. fp32 partials of a 4-way split round like one pass in ~80% of rows (measured,
# H512), so an fp32 probe needs ~12 trials before the control can fire: on CUDA only.
DTYPES = {"cuda": ("bfloat16", "float16", "float32"), "cpu": ("bfloat16",)}
FP32_TRIALS = 12


def _variants(device: str, kernel):
    if is_interpreted(device, kernel.name):
        return [("bfloat16", "bf16", {"label": "H64", "H": 64, "model": "tiny"})]
    return [(dt, QUANT[dt], {"label": f"H{h}", "H": h, "model": m}) for m, h in MODELS[device] for dt in DTYPES[device]]


def in_place(fn, weight, h: int):
    """Rows ``[x | residual]`` -> ``[x after | residual after]`` through the in-place call."""

    def run(rows: torch.Tensor) -> torch.Tensor:
        x, res = rows[:, :h].clone(), rows[:, h:].clone()  # in place: never the caller's rows
        out, new_res = fn(x, res, weight, EPS)
        return torch.cat([out, new_res], dim=1)

    return run


@pytest.mark.parametrize(("device", "name", "dtype_name", "shape", "oracle"), params(GROUP, FAMILY, _variants))
def test_add_rmsnorm(invariance, device, name, dtype_name, shape, oracle):
    from pytest_invariance.oracles.inputs import rows_pool, wide_spread
    from pytest_invariance.reference_kernels.mutants.fused_norm_mutants import (
        add_rmsnorm_block_switch,
        per_call,
    )

    kernel = kernel_named(GROUP, FAMILY, device, name)
    dtype, h = getattr(torch, dtype_name), shape["H"]
    weight = wide_spread((h,), 7, dtype, decades=1.0, device=device)
    batch = sizes(invariance, device, name, CPU_SIZES, EDGES)
    mutant = add_rmsnorm_block_switch
    if is_interpreted(device, name):  # sizes 1..5 there: the same mechanism, its edge moved to 3 rows
        mutant = partial(add_rmsnorm_block_switch, switch_rows=3)
    control = per_call(mutant) if oracle == "run-to-run" else mutant
    n_trials = trials(invariance, device, name)
    if dtype_name == "float32" and not is_interpreted(device, name):
        n_trials = max(n_trials, FP32_TRIALS)
    invariance.check(
        in_place(kernel.fn, weight, h),
        lambda seed: rows_pool(max(batch), (2 * h,), seed, dtype, device),
        oracle=oracle,
        control=in_place(control, weight, h),
        control_name="mutant:add-rmsnorm-block-switch" + ("-per-call" if oracle == "run-to-run" else ""),
        family=FAMILY, implementation=name, quantization=QUANT[dtype_name], dtype=dtype,
        shape=record_shape(shape), expect=expect_of(kernel, oracle), batch_sizes=batch, trials=n_trials,
        extra={"op": "fused_add_rms_norm", "eps": EPS, "device": device, "row": "[x | residual] -> [x | residual]"},
    )  # fmt: skip
