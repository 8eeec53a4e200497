"""Where the probe's row is, and what is said when it cannot be located (never guessed)."""

from __future__ import annotations

import torch
from pytest_invariance.reference_kernels import enable
from torch import nn

from pytest_invariance.localize.digest import content_digest
from pytest_invariance.localize.rows import ROW, UNKNOWN, WHOLE, layout, probe_view
from pytest_invariance.localize.run import localize


def test_layouts() -> None:
    assert layout((1, 4, 8), (6, 4, 8), 6).kind == ROW
    assert layout((4, 8), (24, 8), 6) == layout((4, 8), (24, 8), 6)  # flattened tokens: block of 4 rows
    assert layout((4, 8), (4, 8), 6).kind == WHOLE
    assert layout((4, 8), (20, 8), 6).kind == UNKNOWN  # not 6x: routed tokens, padding
    assert layout((1, 4), (6, 8), 6).kind == UNKNOWN  # two dims differ
    t = torch.arange(24).reshape(6, 4)
    assert probe_view(t, layout((1, 4), (6, 4), 6), 2).tolist() == [[8, 9, 10, 11]]


def test_digest_sees_one_bit() -> None:
    x = torch.randn(1000)
    y = x.clone()
    y.view(torch.int32)[517] ^= 1
    assert torch.equal(content_digest(x), content_digest(x.clone()))
    assert not torch.equal(content_digest(x), content_digest(y))
    assert not torch.equal(content_digest(x), content_digest(x.to(torch.float64)))  # dtype is part of it


class BatchMean(nn.Module):
    """Subtracts the mean over the whole batch: the probe depends on its neighbours by design."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return h - h.mean(0, keepdim=True)


def test_a_reduction_across_the_batch_is_named_as_mixing_not_hidden() -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 3, 16)
    with enable():
        res = localize(BatchMean(), x[0], x[1:], batch_sizes=(8,), positions=[0])
    (cfg,) = res.configs
    assert cfg.verdict.mixing == "aten.mean.dim at <model>"  # same shape alone and batched: compared whole
    top = res.culprit
    assert top["op"] == "aten.sub.Tensor" and top["via"] == "aten.mean.dim at <model>"
