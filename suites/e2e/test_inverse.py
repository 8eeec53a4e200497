"""Inverse tests: against the target with invariance off, each sweep must observe divergence.

They prove the sweeps can see what they look for; the paired invariance tests reuse these very
outcomes as their positive control.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e import inverse_check

pytestmark = [pytest.mark.e2e, pytest.mark.inverse]


@pytest.mark.parametrize("sweep", ["single", "needle", "mixed", "prefix", "logprobs", "prefill-decode"])
def test_inverse(invariance, control_target, sweep):
    inverse_check(invariance, sweep, control_target)


def test_inverse_cache(invariance, cache_control_target):
    inverse_check(invariance, "cache", cache_control_target)
