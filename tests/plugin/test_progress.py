"""Sweep progress reaches the terminal while the test runs, with capture on, with and without xdist."""

from __future__ import annotations

import pytest

TEST = '''
from pytest_invariance.adapters.base import Progress

def test_sweep_progress():
    bar = Progress(8, "single bundled[invariant]")
    for _ in range(8):
        bar.advance()
    print("captured print")
'''


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_progress_lines_are_live_not_captured(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(test_p=TEST)
    result = pytester.runpytest_subprocess(*xdist, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    shown = result.stdout.str() + result.stderr.str()
    for line in ("single bundled[invariant]: 1/8", "single bundled[invariant]: 8/8"):
        assert line in shown, shown[-2000:]
    assert "captured print" not in shown  # capture itself stays on
