"""``invariance.precision``: the arithmetic actually used against the declared one, through the judge."""

from __future__ import annotations

import json

import pytest

SUITE = '''
import torch.nn.functional as F

def test_ieee(invariance):
    invariance.precision(lambda x, w: F.linear(x, w), implementation="torch")

def test_bf16_output_declared_ieee(invariance):
    invariance.precision(lambda x, w: F.linear(x, w).bfloat16().float(), implementation="bf16-out")
'''


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_precision_is_divergent_when_the_arithmetic_is_not_the_declared_one(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    out = pytester.path / "rec.jsonl"
    result = pytester.runpytest(*xdist, f"--invariance-records={out}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*expected invariant, got divergent*oracle precision*"])
    recs = {r["implementation"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert recs["torch"]["verdict"] == "invariant" and recs["torch"]["evidence"]["measured"] == "fp32-ieee"
    assert recs["torch"]["control"]["evidence"]["measured"] == "fp32-tf32"  # the check tells TF32 apart
    assert recs["bf16-out"]["verdict"] == "divergent" and recs["bf16-out"]["evidence"]["measured"] == "fp32-bf16"
