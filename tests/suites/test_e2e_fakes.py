"""The shipped e2e suites against planted-bug fakes, run as a user runs them (a separate pytest
process, ``--invariance-url``): the padding fake is ``divergent`` in ``single`` (its ladder sizes
alone would have passed it), the replay fake in ``replay``, each later planted bug in the sweep
built to see it, and the clean twin ``invariant`` beside controls that diverged. The fakes stand
in for the bundled control engine here so this stays a few seconds a run; the runs with default
options (bundled control) are in the guide."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from pytest_invariance.fakes import FakeEngine


def _suite(tmp_path, name: str, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    records = tmp_path / f"{name}.jsonl"
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "pytest_invariance.suites.e2e", "-p", "no:cacheprovider",
           "-p", "no:xdist", "-rA", f"--invariance-records={records}", "--invariance-replays=3",
           f"--invariance-fuzz-dir={tmp_path / 'fuzz'}", *args]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    recs = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    return res, recs


def test_clean_twin_invariant_beside_diverging_controls(tmp_path):
    with FakeEngine("none") as clean, FakeEngine("padding") as pad:
        res, recs = _suite(tmp_path, "clean", "-k", "test_single or test_replay", f"--invariance-url={clean.url}",
                           f"--invariance-url-control={pad.url}")  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:]
    verdicts = {(r["oracle"], r["extra"]["role"], r["verdict"]) for r in recs if not r["extra"].get("inverse")}
    assert ("unique-samples", "target", "invariant") in verdicts and ("run-to-run", "target", "invariant") in verdicts
    assert all(r["control"]["diverged"] for r in recs if r["extra"]["role"] == "target"), recs
    assert f"openai@{clean.url.split('//')[1]}" in res.stdout  # the target named by engine and host


def test_padding_fake_divergent_in_single_with_its_buckets(tmp_path):
    with FakeEngine("padding") as pad:
        res, recs = _suite(tmp_path, "padding", "-k", "test_single", f"--invariance-url={pad.url}",
                           f"--invariance-url-control={pad.url}")  # fmt: skip
    assert res.returncode == 1 and re.search(r"FAILED \S*test_single\.py::test_single", res.stdout), res.stdout[-3000:]
    assert "expected invariant, got divergent" in res.stdout
    assert "{1..2,4,8,16} {3} {5..7} {9..15} {17} {65}" in res.stdout, res.stdout[-3000:]
    assert recs[0]["evidence"]["ladder"]["edges"] == [1, 2, 4, 8, 16]


def test_replay_fake_divergent_in_replay(tmp_path):
    with FakeEngine("replay", replay_rate=0.3) as fake:
        res, recs = _suite(tmp_path, "replay", "-k", "test_replay", f"--invariance-url={fake.url}")
    assert res.returncode == 1 and re.search(r"FAILED \S*test_replay\.py::test_replay\b", res.stdout), res.stdout[-3000:]
    assert re.search(r"PASSED \S*test_replay\.py::test_inverse_replay", res.stdout)
    target = [r for r in recs if r["oracle"] == "run-to-run" and not r["extra"].get("inverse")][0]
    assert target["verdict"] == "divergent" and target["evidence"]["failures"] >= 1
    assert target["evidence"]["changed_requests"]


# Each later planted bug, with its default knobs, and the shipped test with default options that
# must call it divergent: large-batch (48 rows) shows only at single's wide batch of 65; mixed-step
# and sampler-path only where requests arrive apart (the fuzzer, at its default quick budget);
# long-context where a prompt passes 1024 tokens (prefix, 255-257 words of bytes).
CAUGHT_BY = [("token-budget", "test_single"), ("large-batch", "test_single"), ("row-index", "test_single"),
             ("stale-slot", "test_single"), ("mixed-step", "test_fuzz"), ("sampler-path", "test_fuzz"),
             ("long-context", "test_prefix")]  # fmt: skip


@pytest.mark.parametrize("bug,test", CAUGHT_BY)
def test_later_planted_bugs_divergent_in_their_sweep(tmp_path, bug, test):
    with FakeEngine(bug) as fake, FakeEngine("padding", ladder=(1, 4096)) as control:
        res, recs = _suite(tmp_path, bug, "-k", f"{test} and not inverse", f"--invariance-url={fake.url}",
                           f"--invariance-url-control={control.url}")  # fmt: skip
    assert res.returncode == 1 and re.search(rf"FAILED \S*{test}\.py::{test}\b", res.stdout), res.stdout[-3000:]
    target = [r for r in recs if r["extra"]["role"] == "target"]
    assert [r["verdict"] for r in target] == ["divergent"] and target[0]["control"]["diverged"], target
