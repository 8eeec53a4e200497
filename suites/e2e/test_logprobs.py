"""e2e `logprobs`: batch 1 vs batch N, token ids and logprob bits at every step.

Positive control: the same sweep on the inverse target (`control_target`, invariance off);
if it sees no divergence the verdict is `vacuous`, never a pass.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e import invariant_check

pytestmark = pytest.mark.e2e


def test_logprobs(invariance, target, control_target):
    invariant_check(invariance, "logprobs", target, control_target)
