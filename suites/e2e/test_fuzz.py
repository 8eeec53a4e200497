"""e2e `fuzz`: hypothesis generates the workload around a greedy probe (how many requests, prompt
lengths at the target's block and chunk edges +-1, prefixes shared with the probe, arrival
offsets, max_tokens, every request parameter the target accepts, streaming, mid-stream
disconnects, n > 1); the probe's token ids and logprob bits must equal the probe alone. A failure
is shrunk by hypothesis, recorded as ``extra.workload`` and written as a standalone reproducer.

Budget: ``--invariance-fuzz-examples`` / ``--invariance-fuzz-time`` (default by profile: quick 50
workloads or 300 s). Positive control: the same search on the inverse target (`control_target`),
which must find and shrink a failure; if it finds none the verdict is `vacuous`, never a pass.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e.fuzz_checks import fuzz_check, fuzz_inverse_check

pytestmark = pytest.mark.e2e


def test_fuzz(invariance, target, control_target, fuzz_options):
    fuzz_check(invariance, target, control_target, fuzz_options)


@pytest.mark.inverse
def test_inverse_fuzz(invariance, control_target, fuzz_options):
    fuzz_inverse_check(invariance, control_target, fuzz_options)
