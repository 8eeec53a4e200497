"""``pytest-invariance fuzz URL``: a verdict and its exit status against fakes, a record with the
shrunk workload, and one-line errors (exit 2, no traceback) for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_invariance.cli import main
from pytest_invariance.fakes import FakeEngine

STEP_S = 0.02  # see test_fuzz_search


def _fuzz(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    rc = main(["fuzz", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_clean_target_beside_a_failing_control_is_invariant(tmp_path: Path, capsys: pytest.CaptureFixture):
    records = tmp_path / "r.jsonl"
    with FakeEngine("none") as clean, FakeEngine("neighbour", neighbour_trigger="sampling", step_s=STEP_S) as bad:
        rc, out, err = _fuzz(capsys, clean.url, "--engine", "vllm", "--control", bad.url, "--examples", "15",
                             "--time", "60", "--shrink-time", "20", "--dir", str(tmp_path / "fz"), "--records", str(records))  # fmt: skip
    assert rc == 0 and "verdict: invariant" in out, out + err
    (rec,) = [json.loads(line) for line in records.read_text().splitlines()]
    assert rec["oracle"] == "workload" and rec["verdict"] == "invariant" and rec["control"]["diverged"] is True
    assert rec["evidence"]["examples"] == 15 and "workload" not in rec["extra"]


def test_divergent_target_exits_1_with_its_workload_and_reproducer(tmp_path: Path, capsys: pytest.CaptureFixture):
    records = tmp_path / "r.jsonl"
    with FakeEngine("neighbour", neighbour_trigger="sampling", step_s=STEP_S) as bad:
        rc, out, err = _fuzz(capsys, bad.url, "--engine", "vllm", "--control", "none", "--examples", "40",
                             "--time", "60", "--shrink-time", "20", "--dir", str(tmp_path / "fz"), "--records", str(records))  # fmt: skip
    assert rc == 1 and "verdict: divergent" in out and "reproducer: " in out, out + err
    (rec,) = [json.loads(line) for line in records.read_text().splitlines()]
    assert rec["extra"]["workload"]["neighbours"] and Path(rec["extra"]["reproducer"]).is_file()


def test_no_control_is_no_clean_pass(tmp_path: Path, capsys: pytest.CaptureFixture):
    with FakeEngine("none") as clean:
        rc, out, _ = _fuzz(capsys, clean.url, "--engine", "vllm", "--control", "none", "--examples", "3",
                           "--dir", str(tmp_path))  # fmt: skip
    assert rc == 3 and "verdict: vacuous" in out, out


@pytest.mark.parametrize("args, says", [
    (["http://127.0.0.1:9", "--control", "none"], "is unreachable"),
    (["nonsense"], "not a usable URL"),
    (["http://127.0.0.1:9", "--examples", "0"], "--examples: expected a positive number"),
    (["http://127.0.0.1:9", "--time", "soon"], "--time: expected a positive number"),
    (["http://127.0.0.1:9", "--engine", "tgi"], "invalid choice"),
])  # fmt: skip
def test_bad_input_is_one_line_exit_2(args: list[str], says: str, capsys: pytest.CaptureFixture):
    rc, out, err = _fuzz(capsys, *args)
    assert rc == 2 and says in err and err.strip().count("\n") == 0 and "Traceback" not in err, err


def test_records_path_that_is_a_directory_is_refused_without_a_traceback(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "pytest_invariance.cli", "fuzz", "http://127.0.0.1:9",
                           "--records", str(tmp_path)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "is a directory" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
