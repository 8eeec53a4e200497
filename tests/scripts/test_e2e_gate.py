"""scripts/e2e_gate.py tells a broken harness from a finding: against a batch-variant engine a
``vacuous`` inverse test is a finding, while an ``incomplete`` record, a record without the target's
model/dtype/version, a pytest error or no ``divergent`` at all fail the CI step."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pytest_invariance import hardware
from pytest_invariance.recordio import append_records, read_records
from pytest_invariance.records import make_record

_SPEC = importlib.util.spec_from_file_location("e2e_gate", Path(__file__).parents[2] / "scripts" / "e2e_gate.py")
gate = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gate)


def _rec(verdict: str, model: str | None = "tiny", dtype: str | None = "bfloat16", version: str | None = "0.32.0"):
    return make_record(run_id="r", fingerprint=hardware.fingerprint(), family="engine", implementation="vllm",
                       oracle="unique-samples", verdict=verdict, nodeid=f"t::{verdict}", dtype=dtype,
                       shape={"sweep": "single", "model": model},
                       extra={"summary": verdict, "server_info": {"version": version}})  # fmt: skip


def _run(tmp_path: Path, recs: list[dict], rc: int = 1, **kw) -> int:
    path = tmp_path / "run.jsonl"
    append_records(path, recs)
    return gate.check(str(path), "vllm", rc, **kw)[0]


def test_divergent_and_vacuous_with_identity_pass_and_are_appended(tmp_path):
    out = tmp_path / "kept.jsonl"
    path = tmp_path / "run.jsonl"
    append_records(path, [_rec("divergent"), _rec("vacuous")])
    assert gate.main(["check", str(path), "--implementation", "vllm", "--pytest-rc", "1", "--append-to", str(out)]) == 0
    assert [r["verdict"] for r in read_records(out)[0]] == ["divergent", "vacuous"]


@pytest.mark.parametrize(
    "recs, rc",
    [
        ([_rec("divergent"), _rec("incomplete")], 1),  # the harness could not finish
        ([_rec("divergent", dtype=None)], 0),  # the target's identity lost
        ([_rec("vacuous")], 1),  # a batch-variant engine and not one divergent verdict
        ([_rec("divergent")], 2),  # pytest itself erred
        ([], 0),  # nothing recorded
    ],
)
def test_a_broken_harness_fails(tmp_path, recs, rc):
    assert _run(tmp_path, recs, rc) == 1


def test_required_identity_and_divergence_are_settable(tmp_path):
    assert _run(tmp_path, [_rec("vacuous", dtype=None)], need_divergent=False, required=("model",)) == 0


def test_unsupported_mode_is_recorded_with_its_reason(tmp_path):
    out = tmp_path / "kept.jsonl"
    assert gate.main(["unsupported", "--implementation", "vllm", "--mode", "invariant", "--reason", "dies at warm-up",
                      "--append-to", str(out), "--version", "0.32.0", "--dtype", "bfloat16"]) == 0  # fmt: skip
    (rec,), problems = read_records(out)
    assert not problems and rec["verdict"] == "unsupported" and rec["mode"] == "invariant"
    assert rec["evidence"]["reason"] == "dies at warm-up" and rec["extra"]["server_info"]["version"] == "0.32.0"
