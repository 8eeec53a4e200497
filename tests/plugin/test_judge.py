"""The one judge: a subject or a control that raises is ``incomplete`` (never ``vacuous``), with the
error in the message and the record; the per-op fixture and the e2e checks share it."""

from __future__ import annotations

import json

import pytest

from pytest_invariance.judge import Control, Observation, decide

XDIST = [[], ["-n", "2"]]

SUITE = '''
import torch

def rows(seed):
    return torch.randn(20, 32, generator=torch.Generator().manual_seed(seed))

def rowwise(x):
    return x * 2.0

def control_that_raises(x):
    raise RuntimeError("boom in the control")

def subject_that_raises(x):
    if x.shape[0] > 3:
        raise RuntimeError("boom at batch %d" % x.shape[0])
    return x * 2.0

def test_control_raises(invariance):
    invariance.batch(rowwise, rows, family="matmul", implementation="rowwise", quantization="fp32-ieee",
                     control=control_that_raises, control_name="mutant:broken", batch_sizes=[1, 2, 8])

_calls = [0]

def nondeterministic(x):
    _calls[0] += 1
    return x * (1.0 + 1e-6 * (_calls[0] % 3))

def test_nondeterministic_is_not_batch_classes(invariance):
    invariance.batch(nondeterministic, rows, family="matmul", implementation="random-order",
                     quantization="fp32-ieee", control=rowwise, batch_sizes=[1, 2, 8], expect="measure")

def test_subject_raises(invariance):
    invariance.batch(subject_that_raises, rows, family="matmul", implementation="flaky",
                     quantization="fp32-ieee", control=rowwise, batch_sizes=[1, 2, 8])
'''


def test_decide_control_error_is_incomplete_not_vacuous():
    eq = Observation(False, {})
    assert decide(eq, Control("c", Observation(None, {}, error="RuntimeError: boom"))) == "incomplete"
    assert decide(eq, Control("c", Observation(False, {}))) == "vacuous"
    assert decide(eq, Control("c", Observation(True, {}))) == "invariant"
    assert decide(eq, None) == "vacuous"
    assert decide(Observation(True, {}), None) == "divergent"
    assert decide(Observation(False, {}, error="timeout"), Control("c", Observation(True, {}))) == "incomplete"
    assert decide(Observation(None, {}, unsupported="no logprobs"), None) == "unsupported"


@pytest.mark.parametrize("xdist", XDIST, ids=["serial", "xdist"])
def test_a_raise_is_incomplete_with_its_error(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(test_suite=SUITE)
    out = pytester.path / "rec.jsonl"
    result = pytester.runpytest(*xdist, f"--invariance-records={out}")
    result.assert_outcomes(failed=2, passed=1)
    # one line each, in whatever order the workers finished
    result.stdout.fnmatch_lines(["*batch-size on rowwise incomplete: control mutant:broken raised: RuntimeError: boom*"])
    result.stdout.fnmatch_lines(["*batch-size on flaky incomplete: RuntimeError: boom at batch 8*"])
    recs = {r["implementation"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert recs["rowwise"]["verdict"] == "incomplete"
    assert recs["rowwise"]["control"]["error"] == "RuntimeError: boom in the control"
    assert recs["flaky"]["verdict"] == "incomplete"
    nd = recs["random-order"]
    assert nd["verdict"] == "divergent" and nd["evidence"]["nondeterministic"].startswith("run-to-run")
    assert "equivalence_classes" not in nd["evidence"]
    assert nd["evidence"]["first"]["label"] == "run-to-run pre-check"
