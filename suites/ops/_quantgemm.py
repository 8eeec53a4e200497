"""Shared plumbing of the quantized-GEMM suites (``test_fp8_block``, ``test_int4``): shapes and the check."""

from __future__ import annotations

from collections.abc import Callable

from ._familysuite import expect_of, is_interpreted, kernel_named, record_shape, sizes, trials

GROUP = "quant-gemm"
CPU_SIZES = (1, 2, 8, 16, 17, 33)  # the split mutant's edges (16, 64) reach into the CPU sweep at 16/17
EDGES = (16, 17, 64, 65)
INTERPRET_SPLITS = ((2, 2),)
INTERPRET_SHAPE = {"label": "tiny", "model": "tiny", "layer": "tiny", "K": 256, "N": 64}


def gemm_variants(quant: str, cpu_shape: dict, cuda_shapes: list[dict]) -> Callable:
    def variants(device: str, kernel):
        if is_interpreted(device, kernel.name):
            return [(quant, quant, INTERPRET_SHAPE)]
        return [(quant, quant, s) for s in ([cpu_shape] if device == "cpu" else cuda_shapes)]

    return variants


def shape(model: str, layer: str, k: int, n: int) -> dict:
    return {"label": f"{model}.{layer}", "model": model, "layer": layer, "K": k, "N": n}


def record_unsupported(invariance, family: str, name: str, oracle: str, quant: str, shp: dict,
                       why: str | None) -> bool:  # fmt: skip
    """Record ``unsupported`` with ``why`` (a stock this torch/GPU cannot run); False, nothing recorded, if None."""
    if why is None:
        return False
    invariance.record(family=family, implementation=name, oracle=oracle, verdict="unsupported", quantization=quant,
                      shape=record_shape(shp), extra={"reason": why})  # fmt: skip
    return True


def run_gemm_check(invariance, family: str, device: str, name: str, quant: str, shp: dict, oracle: str,
                   weights: tuple, mutant: Callable, mutant_name: str, extra: dict) -> None:  # fmt: skip
    """The batch / position / run-to-run check of ``fn(x, *weights)`` on bf16 rows of width K."""
    from functools import partial

    from pytest_invariance.reference_kernels.mutants.fused_norm_mutants import per_call

    from ._gemmsuite import wide

    torch = __import__("torch")
    kernel = kernel_named(GROUP, family, device, name)
    batch = sizes(invariance, device, name, CPU_SIZES, EDGES)
    if is_interpreted(device, name):  # sizes 1..5 there: the same mechanism, its edge moved to 2 rows
        mutant = partial(mutant, table=INTERPRET_SPLITS)
    if oracle == "run-to-run":
        control, control_name = per_call(mutant, (1, 1024)), f"{mutant_name}-per-call"
    else:
        control, control_name = mutant, mutant_name
    k = shp["K"]

    def make(seed: int):
        return wide((max(batch), k), seed, device, torch.bfloat16)

    if kernel.role == "stock":  # its first call: a library that refuses it makes the row unsupported
        from pytest_invariance.reference_kernels.device import library_refusal

        why = library_refusal(lambda: kernel.fn(make(0)[:1], *weights))
        if record_unsupported(invariance, family, name, oracle, quant, shp, why):
            return
    invariance.check(
        lambda x: kernel.fn(x, *weights),
        make,
        oracle=oracle, control=lambda x: control(x, *weights), control_name=control_name,
        family=family, implementation=name, quantization=quant, dtype=torch.bfloat16,
        shape=record_shape(shp), expect=expect_of(kernel, oracle), batch_sizes=batch,
        trials=trials(invariance, device, name), extra={"device": device, **extra},
    )  # fmt: skip
