"""e2e `speculative`: greedy speculative decoding (prompt-lookup drafts) equals plain greedy decoding,
token ids and logprob bits at every step, on prompts whose drafts are often accepted.

In invariant mode the reference attention's decode at t equals its prefill at t bitwise, so
verifying k+1 positions in one pass must give plain decoding's bits. A run in which no draft was
accepted is `vacuous`. Positive control and inverse test: the same pair in default mode must
diverge somewhere in the sweep.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e.speculative import speculative_check, speculative_inverse_check

pytestmark = pytest.mark.e2e


def test_speculative(invariance, target, speculative_target, control_target, speculative_control_target):
    speculative_check(invariance, target, speculative_target, control_target, speculative_control_target)


@pytest.mark.inverse
def test_inverse_speculative(invariance, control_target, speculative_control_target):
    speculative_inverse_check(invariance, control_target, speculative_control_target)
