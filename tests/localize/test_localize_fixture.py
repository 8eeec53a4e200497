"""``invariance.localize``: fails naming the culprit; passes (with its planted control) when clean."""

from __future__ import annotations

import pytest
from pytest_invariance.reference_kernels import enable
from tiny_models import Tiny, rows

from pytest_invariance.judge import InvarianceFailure
from pytest_invariance.localize.plant import plant


def test_clean_model_passes_beside_a_control_that_named_its_plant(invariance) -> None:
    x = rows(16, tokens=8)
    with enable():
        rec = invariance.localize(Tiny(), x[0], x[1:], batch_sizes=(1, 8, 16))
    assert rec["verdict"] == "invariant" and rec["oracle"] == "localize"
    assert rec["control"]["diverged"] is True and rec["control"]["evidence"]["named"] == "inp"
    assert rec["mode"] == "invariant" and rec["quantization"] == "fp32-ieee"


def test_planted_model_fails_with_the_culprit_in_the_message(invariance) -> None:
    x = rows(16, tokens=8)
    with enable(), pytest.raises(InvarianceFailure) as info:
        invariance.localize(plant(Tiny(), "layers.1.down"), x[0], x[1:], batch_sizes=(1, 8, 16), control=False)
    msg = str(info.value)
    assert "got divergent" in msg and "layers.1.down" in msg and "| layers.1.down |" in msg
    rec = invariance.records[-1]
    assert rec["evidence"]["culprit"]["module"] == "layers.1.down"
    assert rec["evidence"]["differing_batch_sizes"] == [8, 16]


def test_bad_neighbours_are_incomplete_in_one_line(invariance) -> None:
    x = rows(4, tokens=8)
    with pytest.raises(pytest.fail.Exception, match="localize on Tiny incomplete: ValueError: batch size 8 needs 7"):
        invariance.localize(Tiny(), x[0], x[1:], batch_sizes=(1, 8))
