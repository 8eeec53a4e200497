"""e2e `replay`: one concurrent workload (32 distinct prompts quick, 64 full; spread lengths,
staggered arrivals, every other one streamed) replayed K times (``--invariance-replays``, default
5): every request's token ids and logprob bits must be identical in every replay (oracle
``run-to-run``, reported as failures/K and the requests that changed).

Positive control: the same replays on the planted-bug ``replay`` fake engine, whose reduction order
is a race whenever two requests share a step; if it shows no difference the verdict is `vacuous`.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e import invariant_check, inverse_check

pytestmark = pytest.mark.e2e


def test_replay(invariance, target, replay_control_target):
    invariant_check(invariance, "replay", target, replay_control_target)


@pytest.mark.inverse
def test_inverse_replay(invariance, replay_control_target):
    inverse_check(invariance, "replay", replay_control_target)
