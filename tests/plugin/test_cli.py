"""The ``pytest-invariance`` command: outputs, skipped-line warnings, exit codes, one-line errors."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic_records import rec

from pytest_invariance.cli import main
from pytest_invariance.recordio import append_records


def _records_file(tmp_path: Path, records: list[dict], name: str = "records.jsonl") -> Path:
    path = tmp_path / name
    append_records(path, records)
    return path


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pytest-invariance")
    return lines[0]


def test_matrix_renders_and_prints_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _records_file(tmp_path, [rec(verdict="divergent"), rec(oracle="run-to-run")])
    assert main(["matrix", str(path), "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out.split()
    assert out == [str(tmp_path / "m" / name) for name in ("matrix.md", "matrix-full.md", "matrix.html", "matrix.csv", "matrix.json")]
    cells = json.loads((tmp_path / "m" / "matrix.json").read_text())["cells"]
    assert [(c["oracle"], c["verdict"]) for c in cells] == [
        ("batch-size", "divergent"),
        ("run-to-run", "invariant"),
    ]


def test_matrix_reports_skipped_lines_and_still_renders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _records_file(tmp_path, [rec()])
    with open(path, "a") as f:
        f.write('{"schema": "pytest-invariance.record/1", "fam\n')
        f.write(json.dumps(rec(oracle="run-to-run")) + "\n")
    assert main(["matrix", str(path), "--out", str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    assert f"warning: {path}:2: invalid JSON (" in err and "line skipped" in err
    assert len(json.loads((tmp_path / "m" / "matrix.json").read_text())["cells"]) == 2


def test_no_readable_record_exits_nonzero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("garbage\n[]\n")
    assert main(["matrix", str(path), "--out", str(tmp_path / "m")]) == 1
    err = capsys.readouterr().err
    assert f"{path}:1: invalid JSON" in err and f"{path}:2: not a JSON object" in err
    assert f"error: no record could be read from {path}" in err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["matrix", "{missing}", "--out", "{out}"], "records file not found: {missing}"),
        (["matrix", "{good}", "--out", "{good}"], "--out {good}: exists and is not a directory"),
        (["matrix", "{good}"], "the following arguments are required: --out"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["compare", "{good}", "--expect", "{missing}"], "expected matrix not found: {missing}"),
        (["compare", "{good}", "--expect", "{good}"], "{good} is not a matrix.json"),
    ],
)
def test_bad_values_are_one_line_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    names = {"missing": str(tmp_path / "missing.jsonl"), "out": str(tmp_path / "m"), "good": ""}
    names["good"] = str(_records_file(tmp_path, [rec()]))
    argv = [a.format(**names) for a in argv]
    assert main(argv) == 2
    assert needle.format(**names) in _one_line_error(capsys.readouterr().err)


def test_compare_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _records_file(tmp_path, [rec(), rec(oracle="run-to-run")], "base.jsonl")
    assert main(["matrix", str(base), "--out", str(tmp_path / "m")]) == 0
    expected = str(tmp_path / "m" / "matrix.json")
    capsys.readouterr()

    assert main(["compare", str(base), "--expect", expected]) == 0
    assert capsys.readouterr().out.strip() == f"no regressions against {expected}"

    later = _records_file(
        tmp_path,
        [rec(oracle="run-to-run", verdict="divergent", time="2026-06-01T00:00:00+00:00")],
        "later.jsonl",
    )
    assert main(["compare", str(base), str(later), "--expect", expected]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "REGRESSION matmul / torch / fp32-ieee on NVIDIA H200 · cc 9.0, run-to-run: was invariant, now divergent"
    )
    assert out[-1] == f"1 regression(s) against {expected}"


def test_console_script_module_runs(tmp_path: Path) -> None:
    """The real entry point in a fresh interpreter: exit status reaches the shell."""
    path = _records_file(tmp_path, [rec()])
    ok = subprocess.run(
        [sys.executable, "-m", "pytest_invariance.cli", "matrix", str(path), "--out", str(tmp_path / "m")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "m" / "matrix.html").is_file()
    bad = subprocess.run(
        [sys.executable, "-m", "pytest_invariance.cli", "matrix", "--out", str(tmp_path / "m")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2
    _one_line_error(bad.stderr)


def test_serve_dispatches_to_the_engine_server(tmp_path: Path) -> None:
    """``serve`` hands its arguments to pytest_invariance.engine.server.serve_main, or says why it can't."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_invariance.cli", "serve", "--help"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if importlib.util.find_spec("pytest_invariance.engine.server") is None:
        assert proc.returncode == 2
        assert "no bundled engine server" in _one_line_error(proc.stderr)
    else:
        assert proc.returncode == 0, proc.stderr
        assert "usage" in proc.stdout.lower()
        bad = subprocess.run(
            [sys.executable, "-m", "pytest_invariance.cli", "serve", "--no-such-flag"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert bad.returncode == 2
        assert "--no-such-flag" in _one_line_error(bad.stderr)


def test_serve_help_works_without_the_engine_extra_and_serving_says_how_to_install() -> None:
    """FastAPI, starlette and uvicorn blocked: --help still lists the flags; serving is one line."""
    block = "import sys; [sys.modules.__setitem__(m, None) for m in ('fastapi', 'starlette', 'uvicorn')]; "
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-c", block + "from pytest_invariance.cli import main; raise SystemExit(main(" + repr(list(args)) + "))"],
        capture_output=True, text=True, timeout=120,
    )
    helped = run("serve", "--help")
    assert helped.returncode == 0 and "--batch-invariant" in helped.stdout, helped.stderr[-500:]
    served = run("serve", "--port", "0")
    assert served.returncode != 0 and "pip install 'pytest-invariance[engine]'" in served.stderr
    assert "Traceback" not in served.stderr and len(served.stderr.strip().splitlines()) == 1, served.stderr
