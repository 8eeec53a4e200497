"""e2e `prefill-decode`: each decoded token's logprob equals the prefill rescoring of prompt + output, bitwise.

Positive control: the same sweep on the inverse target (`control_target`, invariance off);
if it sees no divergence the verdict is `vacuous`, never a pass.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e import invariant_check

pytestmark = pytest.mark.e2e


def test_prefill_decode(invariance, target, control_target):
    invariant_check(invariance, "prefill-decode", target, control_target)
