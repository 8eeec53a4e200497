"""Localization names the planted batch-variant module, and nothing upstream of it."""

from __future__ import annotations

import pytest
from pytest_invariance.reference_kernels import enable
from tiny_models import Tiny, rows

from pytest_invariance.localize.plant import plant
from pytest_invariance.localize.run import localize

SIZES = (1, 8, 64)


def _upstream_clean(res, planted: str) -> None:
    """No configuration has a differing event that completed before the culprit."""
    for c in res.configs:
        k = c.verdict.culprit
        assert k is not None and k.path == planted, (c.batch_size, c.position, k)
        assert c.verdict.upstream_differing == 0


@pytest.mark.parametrize(("path", "kind"), [("layers.1.up", "splitk-matmul"), ("layers.0.norm", "rmsnorm-split")])
def test_planted_module_is_the_culprit(path: str, kind: str) -> None:
    # 16 tokens per row: with 4, the split sums of squares of fp32 rows often round to the same rsqrt
    x = rows(33, tokens=16)
    with enable():
        res = localize(plant(Tiny(), path, kind), x[0], x[1:], batch_sizes=(8, 33))
    assert res.culprit is not None and res.culprit["module"] == path
    assert res.culprit["batch_sizes"] == [8, 33]
    _upstream_clean(res, path)
    for c in res.configs:  # nothing in the layers before the planted one differs
        before = [d for d in c.verdict.drift if d["layer"] in ("inp", "layers.0") and path.startswith("layers.1")]
        assert all(d["differing"] == 0 for d in before), before


def test_all_reference_model_has_no_culprit() -> None:
    x = rows(64)
    with enable():
        res = localize(Tiny(), x[0], x[1:], batch_sizes=SIZES, positions="all")
    assert res.culprit is None and not res.diverged
    assert not res.nondeterministic
    assert all(c.verdict.compared == res.events for c in res.configs)


def test_the_same_model_stock_with_a_plant_under_enable_diverges_where_split_counts_differ() -> None:
    # splitk split count: 4 tokens alone (M=4: 8 splits) vs batch 8 (M=32: 4 splits) vs 64 (M=256: 1)
    x = rows(64)
    with enable():
        res = localize(plant(Tiny(), "inp"), x[0], x[1:], batch_sizes=(1, 2, 8))
    by_size = {c.batch_size: c.verdict.culprit for c in res.configs}
    assert by_size[1] is None and by_size[2] is None  # M=4 and M=8: the same 8 splits
    assert by_size[8] is not None and by_size[8].path == "inp"


def test_digests_only_still_find_the_culprit_without_ulp() -> None:
    x = rows(64)
    with enable():
        res = localize(plant(Tiny(), "layers.1.up"), x[0], x[1:], batch_sizes=(8,), positions=[0], keep_numel=0)
    assert res.culprit["module"] == "layers.1.up" and res.culprit["max_ulp"] is None
    assert res.configs[0].verdict.upstream_differing == 0
