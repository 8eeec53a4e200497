"""The README's fixture example runs as pasted into a new test file, and fails readably."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```python\n(# test_my_linear\.py.*?)```", text, re.S)
    assert block, "README lost its fixture example"
    return block.group(1)


def test_readme_fixture_example_runs_as_pasted(pytester: pytest.Pytester) -> None:
    pytest.importorskip("torch")
    pytester.makepyfile(test_my_linear=_example())
    # the example as pasted, run as the README says (pytest test_my_linear.py --invariance-limit 17)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "test_my_linear.py", "--invariance-limit", "17")
    result.assert_outcomes(passed=1)


def test_a_failing_check_shows_evidence_not_the_fixture(pytester: pytest.Pytester) -> None:
    """A batch-variant kernel checked against expect=invariant: the message names the evidence."""
    pytest.importorskip("torch")
    broken = _example().replace("return linear(x, W)", "return splitk_matmul(W)(x)")
    pytester.makepyfile(test_my_linear=broken)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "--invariance-limit=9")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "expected invariant, got divergent: matmul / my_linear / bf16 / oracle batch-size" in out
    assert "Invariance(settings=" not in out and "records=[" not in out
    assert "def batch(self" not in out  # the fixture's frames are hidden
    # one max ULP: the failure's (over all trials) is the summary's
    (fail_ulp,) = set(re.findall(r"over all trials max ULP (\d+)", out))  # CI=true repeats it in the summary
    assert f"max ULP {fail_ulp}," in out.split("invariance summary")[1]
