"""The shipped ``suites/e2e/test_fuzz.py`` as a user runs it, against planted-bug fakes by URL:
a clean target beside a neighbour-bug control is ``invariant``; the neighbour-bug target is
``divergent`` with ``extra.workload`` and a reproducer on disk (the clean run with ``-n 2``, the
flagged one serial)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_invariance.fakes import FakeEngine

SUITE_DIR = Path(__file__).resolve().parents[2] / "suites" / "e2e"
STEP_S = 0.02  # 20 ms engine steps: overlapping requests co-run despite a loaded machine's jitter


def test_fuzz_suite_against_fakes(pytester: pytest.Pytester) -> None:
    """The clean run goes through ``-n 2`` (its two tests, fuzz and inverse fuzz, on two workers,
    records merged from both), the flagged run serially: each path once, at half the cost of both
    runs twice."""
    pytester.makeconftest((SUITE_DIR / "conftest.py").read_text())
    pytester.makepyfile(test_fuzz=(SUITE_DIR / "test_fuzz.py").read_text())
    rec, fuzz_dir = pytester.path / "rec.jsonl", pytester.path / "fz"
    budget = ["--invariance-fuzz-examples=8", "--invariance-fuzz-time=30", f"--invariance-fuzz-dir={fuzz_dir}",
              f"--invariance-records={rec}", "--invariance-engine=vllm", "-p", "no:randomly"]  # fmt: skip
    with FakeEngine("none") as clean, FakeEngine("neighbour", neighbour_trigger="sampling", step_s=STEP_S,
                                                    report_ladder="none") as bad:  # a plain server: mode unknown
        ok = pytester.runpytest_subprocess(f"--invariance-url={clean.url}", f"--invariance-url-control={bad.url}", *budget,
                                           "-n", "2", "--dist", "loadgroup")  # fmt: skip
        ok.assert_outcomes(passed=2)  # test_fuzz invariant, test_inverse_fuzz divergent (as it must be)
        flagged = pytester.runpytest_subprocess(f"--invariance-url={bad.url}", f"--invariance-url-control={bad.url}",
                                     "-k", "not inverse", *budget)  # fmt: skip
    flagged.assert_outcomes(failed=1)
    out = flagged.stdout.str()
    assert "expected invariant, got divergent" in out and "Traceback" not in out, out[-3000:]
    records = [json.loads(line) for line in rec.read_text().splitlines()]
    verdicts = sorted((r["extra"].get("inverse", False), r["verdict"]) for r in records)
    assert verdicts == [(False, "divergent"), (False, "invariant"), (True, "divergent")], verdicts
    bad_rec = next(r for r in records if r["verdict"] == "divergent" and not r["extra"].get("inverse"))
    assert bad_rec["oracle"] == "workload" and bad_rec["extra"]["workload"]["neighbours"]
    assert Path(bad_rec["extra"]["reproducer"]).is_file() and bad_rec["control"]["diverged"] is True
