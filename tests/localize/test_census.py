"""The op census: every distinct op at the model's shapes, routed or not, variant or not."""

from __future__ import annotations

import torch
from custom_ops import SplitKOpLinear
from pytest_invariance.reference_kernels import enable
from tiny_models import Tiny, rows

from pytest_invariance.localize.census import census, census_records
from pytest_invariance.localize.run import localize


def _planted() -> Tiny:
    m = Tiny()
    m.layers[1].up = SplitKOpLinear(m.layers[1].up)
    return m


def test_one_op_mutant_is_named_at_op_granularity() -> None:
    x = rows(64)
    with enable():
        res = localize(_planted(), x[0], x[1:], batch_sizes=(1, 8, 64))
    top = res.culprit
    assert top["kind"] == "op" and top["op"] == "invariance_tests.splitk_mm.default" and top["module"] == "layers.1.up"
    assert top["in_shapes"] == [[4, 64], [128, 64]] and top["batch_sizes"] == [8, 64]
    assert all(not c.coarse for c in res.configs)  # one op: nothing left unpaired
    assert all(c.verdict.upstream_differing == 0 for c in res.configs)


def test_census_under_enable_names_routed_ops_and_the_variant_one() -> None:
    x = rows(65)
    with enable():
        res = census(_planted(), x, limit=17)
    by = {(r.spec.name, r.spec.paths[0]): r for r in res.ops}
    mutant = by[("invariance_tests.splitk_mm.default", "layers.1.up")]
    assert mutant.routed is False and mutant.verdicts == {"batch-size": "divergent", "batch-position": "divergent"}
    mm = by[("aten.mm.default", "inp")]
    assert mm.routed and mm.verdicts == {"batch-size": "invariant", "batch-position": "invariant"}
    assert mm.control["batch-size"]["diverged"] is True  # the split-K mutant at mm's own shapes
    norm = by[("aten.rms_norm.default", "layers.0.norm")]
    assert norm.routed and norm.verdicts["batch-size"] == "invariant"
    relu = by[("aten.relu.default", "layers.0")]
    assert relu.routed is False and relu.verdicts["batch-size"] == "vacuous"  # no control for relu: said so
    table = res.table()
    assert "| invariance_tests.splitk_mm.default | invariance_tests.splitk_mm.default | 4x64 | float32 | NO | divergent |" in table
    recs = census_records(res, run_id="r", model="tiny")
    assert len(recs) == 2 * sum(bool(r.verdicts) for r in res.ops)
    assert {r["implementation"] for r in recs if r["family"] == "matmul"} == {"reference"}


def test_census_stock_replays_the_decomposed_norm() -> None:
    res = census(Tiny(), rows(65), limit=9)
    names = {r.spec.name for r in res.ops}
    assert {"aten.pow.Tensor_Scalar", "aten.mean.dim", "aten.rsqrt.default"} <= names  # F.rms_norm decomposed
    mean = next(r for r in res.ops if r.spec.name == "aten.mean.dim")
    assert mean.routed is None and mean.control["batch-size"]["diverged"] is True  # mean-split control


class Attn(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)


def test_census_sdpa_is_routed_under_enable_beside_a_split_kv_control() -> None:
    # 64 keys: the split-KV control (at least 16 keys a split) cuts them by batch size
    x = rows(17, tokens=64, width=16).reshape(17, 1, 64, 16)
    with enable():
        res = census(Attn(), x, limit=17)
    (sdpa,) = [r for r in res.ops if "scaled_dot_product" in r.spec.name]
    assert sdpa.spec.name == "aten.scaled_dot_product_attention.default" and sdpa.routed is True
    assert sdpa.family == "attention-prefill" and sdpa.verdicts["batch-size"] == "invariant"
    assert sdpa.control["batch-size"]["diverged"] is True
