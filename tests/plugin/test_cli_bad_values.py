"""Bad values never give a traceback: a records path that is a directory, an unwritable ``--out``, a
records line nested too deeply, a URL no request can go to. One line, non-zero exit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_records import rec

from pytest_invariance.cli import main
from pytest_invariance.recordio import append_records

SUITE = "def test_one():\n    pass\n"


def test_matrix_out_unwritable_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.jsonl"
    append_records(path, [rec()])
    assert main(["matrix", str(path), "--out", "/proc/nope/x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("pytest-invariance: error: --out /proc/nope/x"), err


def test_records_line_nested_too_deeply_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.jsonl"
    append_records(path, [rec()])
    with open(path, "a") as f:
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
    assert main(["matrix", str(path), "--out", str(tmp_path / "m")]) == 0
    assert f"{path}:2: invalid JSON (nested too deeply)" in capsys.readouterr().err
    assert len(json.loads((tmp_path / "m" / "matrix.json").read_text())["cells"]) == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--invariance-records=."], "--invariance-records: . is a directory"),
        (["--invariance-url=not-a-url"], "--invariance-url: not a usable URL 'not-a-url'"),
        (["--invariance-url=http://127.0.0.1:99999"], "--invariance-url: not a usable URL"),
        (["--invariance-url-control=ftp://x"], "--invariance-url-control: not a usable URL"),
        (["--invariance-request-deadline=0"], "--invariance-request-deadline expects a positive number of seconds"),
        (["--invariance-request-timeout=soon"], "--invariance-request-timeout expects a number of seconds"),
    ],
)
def test_bad_plugin_value_is_a_usage_error(pytester: pytest.Pytester, args: list[str], says: str) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert says in err and "Traceback" not in err and "INTERNALERROR" not in err, err


def test_bad_ini_deadline_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ninvariance_request_deadline = -3\n")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "invariance_request_deadline expects a positive number of seconds" in result.stderr.str()


def test_request_options_reach_the_adapter(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ninvariance_model = m1\ninvariance_request_timeout = 7\n")
    pytester.makepyfile(test_opts="""
from pytest_invariance.plugin import adapter_options

def test_opts(request):
    assert adapter_options(request.config) == {"timeout_s": 7.0, "deadline_s": 9.5, "api_key": "k", "model": "m1"}
""")  # fmt: skip
    result = pytester.runpytest("--invariance-request-deadline=9.5", "--invariance-api-key=k")
    assert result.ret == 0, result.stdout.str()
