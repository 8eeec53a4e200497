"""``reference_kernels.enable()``: routes aten ops, restores on exit and on error, nests."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from pytest_invariance.oracles.batch import batch_position_oracle, batch_size_oracle  # noqa: E402
from pytest_invariance.oracles.inputs import rows_pool, wide_spread  # noqa: E402
from pytest_invariance.reference_kernels import mode, rowops  # noqa: E402

from pytest_invariance import reference_kernels as rk  # noqa: E402


def _bits(t: torch.Tensor) -> bytes:
    return (
        t.contiguous().view(torch.uint8).numpy().tobytes()
        if t.dtype != torch.bfloat16
        else _bits(t.view(torch.int16))
    )


def _routed() -> bool:
    """Whether F.rms_norm currently goes to the reference kernel: its bits match ours and not the stock ones."""
    x = rows_pool(64, (1000,), 31)
    got = F.rms_norm(x, (1000,), None, 1e-6)
    return _bits(got) == _bits(rowops.rms_norm(x, None, 1e-6))


def test_probe_tells_stock_from_reference():
    """The probe used below must be able to fail: stock and reference bits differ on this input."""
    x = rows_pool(64, (1000,), 31)
    assert _bits(F.rms_norm(x, (1000,), None, 1e-6)) != _bits(rowops.rms_norm(x, None, 1e-6))
    assert not _routed()


def test_context_manager_routes_every_op_and_restores():
    x = rows_pool(64, (300,), 32)
    w = wide_spread((300,), 33, decades=1.0)
    b = rows_pool(300, (40,), 34)
    stock_mean = x.mean(-1)
    # precondition: on these inputs stock bits differ from the reference, so equality below means routing
    assert _bits(F.rms_norm(x, (300,), w, 1e-5)) != _bits(rowops.rms_norm(x, w, 1e-5))
    assert _bits(torch.log_softmax(x, -1)) != _bits(rowops.log_softmax(x))
    assert _bits(stock_mean) != _bits(rowops.mean(x))
    with rk.enable():
        assert mode.is_enabled() and mode.depth() == 1
        assert _bits(F.rms_norm(x, (300,), w, 1e-5)) == _bits(rowops.rms_norm(x, w, 1e-5))
        assert _bits(torch.log_softmax(x, -1)) == _bits(rowops.log_softmax(x))
        assert _bits(x.mean(-1)) == _bits(rowops.mean(x))
        assert _bits(x.pow(2).mean(-1, keepdim=True)) == _bits(rowops.mean(x.pow(2), -1, True))
        from pytest_invariance.reference_kernels.matmul import addmm, bmm, mm

        bias = wide_spread((40,), 35)
        assert _bits(torch.mm(x, b)) == _bits(mm(x, b))
        assert _bits(torch.addmm(bias, x, b)) == _bits(addmm(bias, x, b))
        assert _bits(torch.bmm(x[None], b[None])) == _bits(bmm(x[None], b[None]))
    assert not mode.is_enabled() and mode.depth() == 0
    assert not _routed()
    assert _bits(x.mean(-1)) == _bits(stock_mean)


def test_restores_when_the_body_raises():
    with pytest.raises(RuntimeError, match="boom"), rk.enable():
        assert _routed()
        raise RuntimeError("boom")
    assert mode.depth() == 0 and not _routed()


def test_nesting_inner_exit_leaves_outer_on():
    with rk.enable():
        with rk.enable():
            assert mode.depth() == 2 and _routed()
        assert mode.depth() == 1 and _routed()
        with pytest.raises(ValueError), rk.enable():
            raise ValueError
        assert mode.depth() == 1 and _routed()
    assert mode.depth() == 0 and not _routed()


def test_decorator_with_and_without_parentheses():
    @rk.enable()
    def a() -> bool:
        return _routed()

    @rk.enable
    def b(k: int) -> tuple[bool, int]:
        return _routed(), k

    assert a() is True
    assert b(3) == (True, 3)
    assert not _routed()

    @rk.enable
    def c() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        c()
    assert mode.depth() == 0


def test_unsupported_dtypes_fall_back_to_stock():
    a = torch.arange(6).reshape(2, 3)
    with rk.enable():
        assert torch.mm(a, a.T).tolist() == [[5, 14], [14, 50]]
        x = rows_pool(3, (8,), 1, torch.float64)
        assert x.mean(-1).dtype == torch.float64


def test_autograd_through_routed_matmul():
    x = rows_pool(3, (8,), 2).requires_grad_(True)
    w = rows_pool(5, (8,), 3)
    with rk.enable():
        F.linear(x, w).sum().backward()
    torch.testing.assert_close(x.grad, w.sum(0).expand(3, 8))


@pytest.mark.parametrize("kn", [256, 1024])
def test_stock_linear_becomes_batch_invariant(kn):
    """Stock fp32 F.linear on an x86 CPU gives row 0 other bits at batch <= 15 than at 64;
    under enable() the same call is bit-identical at every batch size and position."""
    w = rows_pool(kn, (kn,), 40)
    rows = rows_pool(64, (kn,), 41)
    sizes = [1, 2, 3, 8, 15, 16, 17, 33, 64]

    def fn(r: torch.Tensor) -> torch.Tensor:
        return F.linear(r, w)

    stock = batch_size_oracle(fn, rows, sizes)
    if not stock.diverged:
        pytest.skip(f"stock F.linear is already batch-invariant on this CPU at K=N={kn} (nothing to fix)")
    with rk.enable():
        ref = batch_size_oracle(fn, rows, sizes)
        pos = batch_position_oracle(fn, rows, [3, 17, 64])
        mm_ref = batch_size_oracle(lambda r: torch.mm(r, w.T), rows, sizes)
    assert not ref.diverged, ref.describe()
    assert not pos.diverged, pos.describe()
    assert not mm_ref.diverged, mm_ref.describe()
    assert ref.classes == [sizes]
