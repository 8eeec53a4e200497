"""e2e `prefix`: shared prefixes whose token lengths sit at page and chunk boundaries +-1.

Positive control: the same sweep on the inverse target (`control_target`, invariance off);
if it sees no divergence the verdict is `vacuous`, never a pass.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e import invariant_check

pytestmark = pytest.mark.e2e


def test_prefix(invariance, target, control_target):
    invariant_check(invariance, "prefix", target, control_target)
