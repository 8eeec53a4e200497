"""Reference row kernels: right values, and batch-invariant per the oracles on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from pytest_invariance.oracles.batch import batch_position_oracle, batch_size_oracle  # noqa: E402
from pytest_invariance.oracles.inputs import rows_pool, wide_spread  # noqa: E402
from pytest_invariance.reference_kernels import rowops  # noqa: E402
from pytest_invariance.reference_kernels.mutants.rmsnorm_split import split_rmsnorm  # noqa: E402
from pytest_invariance.reference_kernels.mutants.rowsplit import split_log_softmax, split_mean  # noqa: E402

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# value agreement with torch (not invariance): a few units of the dtype's precision
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}


def close(ref: torch.Tensor, got: torch.Tensor) -> None:
    rtol, atol = TOL[ref.dtype]
    torch.testing.assert_close(got, ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width", [1, 7, 896, 4097])
def test_cpu_path_matches_torch(dtype, width):
    x = rows_pool(5, (width,), 1, dtype)
    w = wide_spread((width,), 2, dtype, decades=1.0)
    close(F.rms_norm(x, (width,), w, 1e-6), rowops.rms_norm(x, w, 1e-6))
    close(torch.log_softmax(x, -1), rowops.log_softmax(x))
    close(x.mean(-1), rowops.mean(x))


def test_mean_over_several_dims_and_keepdim():
    x = rows_pool(6, (5, 7), 3)
    for dim, keep in (((0, 2), False), ([1], True), (None, False), (-2, True)):
        ref = x.mean(dim, keepdim=keep) if dim is not None else x.mean()
        got = rowops.mean(x, dim, keep)
        assert got.shape == ref.shape
        close(ref, got)


def test_log_softmax_other_dim_and_dtype():
    x = rows_pool(4, (9, 5), 4, torch.float16)
    got = rowops.log_softmax(x, 1, dtype=torch.float32)
    assert got.dtype == torch.float32
    close(torch.log_softmax(x, 1, dtype=torch.float32), got)


def test_tree_sum_is_exact_on_integers_and_pads():
    v = torch.arange(1, 1001, dtype=torch.float32).repeat(3, 1)
    assert rowops.tree_sum(v).tolist() == [500500.0] * 3


def _fns(h: int, dtype: torch.dtype):
    w = wide_spread((h,), 5, dtype, decades=1.0)
    return {
        "rms_norm": (lambda r: rowops.rms_norm(r, w, 1e-5), lambda r: split_rmsnorm(r, w, 1e-5)),
        "log_softmax": (rowops.log_softmax, split_log_softmax),
        "mean": (rowops.mean, split_mean),
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["rms_norm", "log_softmax", "mean"])
def test_cpu_path_invariant_across_batch_sizes_1_to_65(op, dtype):
    """The engine's fast CPU path, every batch size 1..65: bit-identical; the split mutant is not."""
    h = 896
    fn, mutant = _fns(h, dtype)[op]
    rows = rows_pool(65, (h,), 11, dtype)
    sizes = list(range(1, 66))
    res = batch_size_oracle(fn, rows, sizes)
    assert not res.diverged, res.describe()
    assert res.classes == [sizes]
    pos = batch_position_oracle(fn, rows, [2, 3, 17, 33, 64, 65])
    assert not pos.diverged, pos.describe()
    control = batch_size_oracle(mutant, rows, sizes)
    for trial_seed in (12, 13):
        if control.diverged:
            break
        batch_size_oracle(
            mutant, rows_pool(65, (h,), trial_seed, dtype), sizes, trial=trial_seed, result=control
        )
    assert control.diverged, f"control {op} split mutant did not diverge: the check above proves nothing"


def test_backend_errors_are_clear():
    x = torch.ones(2, 4)
    with pytest.raises(ValueError, match="needs a CUDA tensor"):
        rowops.rms_norm(x, backend="triton")
    with pytest.raises(ValueError, match="unknown backend"):
        rowops.mean(x, backend="nope")


_INTERPRET_SCRIPT = textwrap.dedent(
    """
    import torch, torch.nn.functional as F
    from pytest_invariance.oracles.batch import batch_size_oracle, batch_position_oracle
    from pytest_invariance.oracles.inputs import rows_pool, wide_spread
    from pytest_invariance.reference_kernels import rowops
    tol = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}
    def close(ref, got):
        torch.testing.assert_close(got, ref, rtol=tol[ref.dtype][0], atol=tol[ref.dtype][1])
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for h in (5, 96):
            x = rows_pool(9, (h,), 1, dtype)
            w = wide_spread((h,), 2, dtype, decades=1.0)
            fns = {
                "rms_norm": (lambda r: rowops.rms_norm(r, w, 1e-6, backend="interpret"),
                             lambda r: F.rms_norm(r, (h,), w, 1e-6)),
                "log_softmax": (lambda r: rowops.log_softmax(r, backend="interpret"),
                                lambda r: torch.log_softmax(r, -1)),
                "mean": (lambda r: rowops.mean(r, backend="interpret"), lambda r: r.mean(-1)),
            }
            for op, (fn, ref) in fns.items():
                close(ref(x), fn(x))
                res = batch_size_oracle(fn, x, [1, 2, 3, 8, 9])
                assert not res.diverged, res.describe()
                pos = batch_position_oracle(fn, x, [3, 9])
                assert not pos.diverged, pos.describe()
    # a row longer than one chunk walks the chunk loop
    import pytest_invariance.reference_kernels._rowops_triton as tk
    tk.SINGLE_PASS_MAX, tk.CHUNK = 64, 32
    x = rows_pool(3, (100,), 3)
    w = wide_spread((100,), 4, decades=1.0)
    close(F.rms_norm(x, (100,), w, 1e-6), rowops.rms_norm(x, w, 1e-6, backend="interpret"))
    close(torch.log_softmax(x, -1), rowops.log_softmax(x, backend="interpret"))
    close(x.mean(-1), rowops.mean(x, backend="interpret"))
    print("OK")
    """
)


def test_triton_kernels_under_interpreter():
    """The CUDA kernels themselves, run by the Triton interpreter on tiny shapes (own process:
    the interpreter must be chosen before triton is imported)."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _INTERPRET_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triton_kernels_on_cuda(dtype):
    h = 4096
    x = rows_pool(129, (h,), 21, dtype, device="cuda")
    w = wide_spread((h,), 22, dtype, decades=1.0, device="cuda")
    close(F.rms_norm(x, (h,), w, 1e-6), rowops.rms_norm(x, w, 1e-6))
    close(torch.log_softmax(x, -1), rowops.log_softmax(x))
    close(x.mean(-1), rowops.mean(x))
    for fn in (lambda r: rowops.rms_norm(r, w, 1e-6), rowops.log_softmax, rowops.mean):
        res = batch_size_oracle(fn, x, [1, 2, 3, 7, 8, 9, 31, 32, 33, 64, 65, 127, 128, 129])
        assert not res.diverged, res.describe()
