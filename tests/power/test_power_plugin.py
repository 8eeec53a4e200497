"""The pass line and the power summary inside a pytest session, with and without xdist.

The cache is seeded with a measurement for the session's configuration (entries shaped as the zoo
writes them), so these runs read power instead of measuring it: what is tested here is the flow
(cache -> records' ``extra.power`` -> pass line, summary line, matrix), not the zoo itself.
"""

from __future__ import annotations

import json

import pytest

from pytest_invariance.power import cache
from pytest_invariance.power.config import PowerConfig

XDIST = [[], ["-n", "2"]]

SUITE = '''
import torch
from pytest_invariance import rows_pool, split_mean

def mean(x):
    return torch.stack([r.sum() / r.shape[0] for r in x])[:, None]

def test_mean(invariance):
    invariance.batch(mean, lambda s: rows_pool(9, (64,), s), control=split_mean(), batch_sizes=[1, 2, 9])

def racy(x):  # the run-to-run control: other low bits on every call
    return mean(x) + torch.randn(x.shape[0], 1) * 1e-3

def test_rerun(invariance):
    invariance.run_to_run(mean, lambda s: rows_pool(9, (64,), s), control=racy)
'''


def entry(name: str, oracle: str, caught: bool, **kw) -> dict:
    e = {"name": name, "layer": "op", "oracle": oracle, "what": name, "caught": caught, "twin": "invariant",
         "false_alarm": False, "rate": None, "runs": 1}
    return {**e, **kw}


SEEDED = [
    entry("split-by-batch", "batch-size", True),
    entry("only-at-6", "batch-size", False, reason="size not swept: needs N=6"),
    entry("split-by-batch", "run-to-run", False, blind="deterministic"),
    entry("only-at-6", "run-to-run", False, blind="deterministic"),
    entry("rare-1-in-10", "batch-size", True, rate=1.0, runs=10),
    entry("rare-1-in-10", "run-to-run", False, rate=0.8, runs=10, reason="detection 0.80 at 3 trials"),
]


@pytest.fixture
def seeded_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.setenv("PYTEST_INVARIANCE_POWER", "auto")
    assert cache.store(PowerConfig(), "ops", SEEDED, 1.0, "test") is not None
    return tmp_path / "cache"


@pytest.mark.parametrize("xdist", XDIST, ids=["serial", "xdist"])
def test_pass_line_and_summary_show_the_zoo_power(pytester, seeded_cache, xdist) -> None:
    pytester.makepyfile(test_power=SUITE)
    out = pytester.path / "rec.jsonl"
    flag = ["--invariance-power"] if xdist else []  # on: the per-class table too (cached: nothing measured)
    result = pytester.runpytest(*xdist, *flag, f"--invariance-records={out}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*invariance summary*",
        "custom / mean  invariant 2  | power over the zoo: batch-size 2/3 (blind to only-at-6 (size not swept: "
        "needs N=6)); run-to-run 0/1 (blind to rare-1-in-10 (detection 0.80 at 3 trials)); weakest pass 3/3 "
        "trials clean, failure rate < 0.56 at 95%",
        "power (ops, profile quick, trials 3, limit none, oracles batch-size,run-to-run): this configuration "
        "catches 2 of 3 planted classes; blind to: only-at-6 (size not swept: needs N=6); 0 false alarms on 3 "
        "clean twins ?cached *",
    ])
    assert "WEAK" not in result.stdout.str()
    table = "*op  only-at-6 * batch-size * MISSED: size not swept: needs N=6; clean twin invariant"
    if xdist:
        result.stdout.fnmatch_lines([table])
    else:
        assert "MISSED" not in result.stdout.str()
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    powers = {r["oracle"]: r["extra"]["power"] for r in recs}
    assert powers["batch-size"]["caught"] == 2 and powers["batch-size"]["classes"] == 3
    assert powers["run-to-run"] == {**powers["run-to-run"], "caught": 0, "classes": 1, "bound_bites": True}


def test_power_off_keeps_the_trial_bound_and_says_power_was_not_measured(pytester, seeded_cache) -> None:
    pytester.makepyfile(test_power=SUITE)
    result = pytester.runpytest("-o", "invariance_power=off")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["custom / mean  invariant 2  | power not measured (batch-size, run-to-run); "
                                 "weakest pass 3/3 trials clean, failure rate < 0.56 at 95%"])
    assert "power (ops" not in result.stdout.str()


def test_another_configuration_is_another_cache_entry(seeded_cache) -> None:
    quick, more = PowerConfig(), PowerConfig(trials=5)
    assert quick.digest("ops") != more.digest("ops")
    assert cache.load(quick, "ops")["entries"] == SEEDED
    assert cache.load(more, "ops") is None
    # levels and dispatch are the e2e zoo's business: the per-op measurement is shared
    assert PowerConfig(levels=(1, 3), dispatch="independent").digest("ops") == quick.digest("ops")
    assert PowerConfig(levels=(1, 3)).digest("e2e") != quick.digest("e2e")


def test_a_bad_power_mode_is_one_line(pytester) -> None:
    pytester.makeini("[pytest]\ninvariance_power = sometimes\n")
    pytester.makepyfile(test_power=SUITE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invariance_power: expected one of auto, on, off, got 'sometimes'*"])
