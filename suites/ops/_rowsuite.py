"""Shared plumbing of the row-op suites (``test_rmsnorm``, ``test_softmax``): inputs, params, the check.

No comparison logic lives here: the ``invariance`` fixture runs the oracles.
"""

from __future__ import annotations

import os
from functools import lru_cache

import pytest
from pytest_invariance.oracles.vocabulary import OP_ORACLES as ORACLES
from pytest_invariance.oracles.vocabulary import QUANTIZATION_OF_DTYPE as QUANT

from ._expect import expect_for  # noqa: F401  (re-exported for the row suites)

DTYPES = ("bfloat16", "float16", "float32")
CPU_BATCH_LIMIT = 33  # CI is a 2-core CPU: stop the quick sweep at 33 rows
INTERPRET_WIDTH = 256  # Triton interpreter: small rows only
INTERPRET_LIMIT = 17
# fp32 keeps a split reduction's partials in fp32, so an 8-way and a one-pass
# sum of one row's squares round to the same RMSNorm output in ~60% of rows
# (measured on CPU, H=896 and 4096), and 3 trials leave the control silent
# ~20% of the time (H200, full profile: rmsnorm fp32 H896, log-softmax fp32
# N128256 came out vacuous). Subject and control both run these trials.
FP32_TRIALS = 12


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def device_params(fam: str, make_shapes) -> list:
    """pytest params (device, kernel name, dtype, shape, oracle) over the registry; CUDA ones marked gpu."""
    from pytest_invariance.reference_kernels.catalogue import register_builtin
    from pytest_invariance.reference_kernels.registry import kernels

    register_builtin("rowops")
    out = []
    for device in ("cpu", "cuda"):
        marks = [pytest.mark.gpu] if device == "cuda" else []
        for k in kernels(fam, device):
            for shape in make_shapes(device, k.name):
                for dtype in DTYPES:
                    for oracle in ORACLES:
                        out.append(
                            pytest.param(
                                device,
                                k.name,
                                dtype,
                                shape,
                                oracle,
                                marks=[*marks, pytest.mark.quant(QUANT[dtype])],
                                id=f"{device}-{k.name}-{shape['label']}-{QUANT[dtype]}-{oracle}",
                            )
                        )
    return out


def batch_limit(device: str, name: str, profile: str) -> int | None:
    """Rows swept: 33 on CPU, 17 under the interpreter, the profile's sweep (to 2049 in ``full``) on CUDA."""
    if device == "cpu":
        return INTERPRET_LIMIT if name.endswith("triton") else CPU_BATCH_LIMIT
    return None


@lru_cache(maxsize=4)
def _pool(rows: int, width: int, seed: int, dtype_name: str, device: str, decades: float):
    import torch
    from pytest_invariance.oracles.inputs import rows_pool

    return rows_pool(rows, (width,), seed, getattr(torch, dtype_name), device, decades=decades)


def pool_inputs(rows: int, width: int, dtype_name: str, device: str, decades: float = 4.0):
    """``seed -> rows`` of order-sensitive values, cached so the control sees the same tensors cheaply."""
    return lambda seed: _pool(rows, width, seed, dtype_name, device, decades).clone()  # cache stays pristine


def trials_for(invariance, dtype_name: str, name: str, device: str) -> int:
    """Trials per check: the session's, raised to ``FP32_TRIALS`` for fp32 (not under the slow interpreter)."""
    if dtype_name == "float32" and not (device == "cpu" and name.endswith("triton")):
        return max(invariance.trials, FP32_TRIALS)
    return invariance.trials


def check_row_op(
    invariance,
    fam: str,
    device: str,
    name: str,
    dtype_name: str,
    oracle: str,
    *,
    width: int,
    bind,
    control_fn,
    control_name: str,
    record_family: str,
    shape: dict,
    extra: dict,
) -> None:
    """One row-op cell: kernel ``name`` of registry family ``fam`` through ``invariance.check`` on
    ``width``-wide rows, against the split-reduction mutant ``control_fn`` (its per-call split count
    for run-to-run, ``-per-call`` added to the name). ``bind(f)`` is the one-argument call of a
    kernel or control (the norm binds its weight and eps)."""
    import torch
    from pytest_invariance.reference_kernels.mutants.rmsnorm_split import per_call_splits
    from pytest_invariance.reference_kernels.registry import kernels

    kernel = next(k for k in kernels(fam, device) if k.name == name)
    limit = batch_limit(device, name, invariance.profile)
    rows = max(invariance.batch_sizes(limit))
    if oracle == "run-to-run":
        control_fn, control_name = per_call_splits(control_fn), f"{control_name}-per-call"
    invariance.check(
        bind(kernel.fn),
        pool_inputs(rows, width, dtype_name, device),
        oracle=oracle,
        control=bind(control_fn),
        control_name=control_name,
        family=record_family,
        implementation=name,
        quantization=QUANT[dtype_name],
        dtype=getattr(torch, dtype_name),
        shape=shape,
        expect=expect_for(kernel.role, kernel.expect, oracle, kernel.oracle_expect),
        limit=limit,
        trials=trials_for(invariance, dtype_name, name, device),
        extra=extra,
    )
