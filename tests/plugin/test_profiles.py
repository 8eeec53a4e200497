"""Profiles from the command line: the records name the sizes swept, and a bad limit is one line."""

from __future__ import annotations

import json

import pytest

SUITE = '''
import torch

def rows(seed):
    return torch.randn(600, 8, generator=torch.Generator().manual_seed(seed))

def test_sizes(invariance):
    invariance.batch(lambda x: x * 2.0, rows, family="matmul", implementation="double",
                     quantization="fp32-ieee", expect="measure")
'''


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_exhaustive_profile_with_a_limit_sweeps_every_size(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(test_suite=SUITE)
    out = pytester.path / "rec.jsonl"
    result = pytester.runpytest(*xdist, "--invariance-profile=exhaustive", "--invariance-limit=6",
                                f"--invariance-records={out}")  # fmt: skip
    result.assert_outcomes(passed=1)
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["extra"]["batch_sizes"] == [1, 2, 3, 4, 5, 6] and rec["profile"] == "exhaustive"


def test_quick_profile_records_the_capture_ladder_sizes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    out = pytester.path / "rec.jsonl"
    pytester.runpytest(f"--invariance-records={out}").assert_outcomes(passed=1)
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert {40, 48, 56} <= set(rec["extra"]["batch_sizes"]) and max(rec["extra"]["batch_sizes"]) == 65


def test_a_bad_limit_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--invariance-limit=0")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--invariance-limit*positive integer*"])
