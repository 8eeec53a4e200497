"""e2e `needle`: the probe prompt at positions {0, 1, mid, N-2, N-1} among N distinct neighbours.

Positive control: the same sweep on the inverse target (`control_target`, invariance off);
if it sees no divergence the verdict is `vacuous`, never a pass.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e import invariant_check

pytestmark = pytest.mark.e2e


def test_needle(invariance, target, control_target):
    invariant_check(invariance, "needle", target, control_target)
