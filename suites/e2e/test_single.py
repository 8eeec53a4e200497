"""e2e `single`: one prompt at concurrency 1..N (quick 17 and a wide batch of 65, full 129): unique samples,
first divergence.

Positive control: the same sweep on the inverse target (`control_target`, invariance off);
if it sees no divergence the verdict is `vacuous`, never a pass.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e import invariant_check

pytestmark = pytest.mark.e2e


def test_single(invariance, target, control_target):
    invariant_check(invariance, "single", target, control_target)
