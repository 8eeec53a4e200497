"""Every command in the README is exercised by a test: each shell line is listed here with the test
that runs it (or the Makefile target it names), so a README command without a test fails this file.
The cheap ones run here as written: the e2e commands against a port nothing listens on (the session
must stop at once, naming the URL: the options parse and the URL is used), the per-op command
collected."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_server import closed_port_url

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

E2E_ACCEPTANCE = "tests/suites/test_e2e_acceptance.py::test_default_mode_url_inverse_passes_invariance_fails_with_evidence"
# command as the README writes it -> the test that runs it (or what it runs)
EXERCISED = {
    "make demo": "tests/suites/test_e2e_acceptance.py::test_demo_default_diverges_invariant_does_not",
    "make test": "tests/plugin/test_readme_commands.py::test_make_targets_run_what_the_readme_says",
    "pip install -e '.[engine]'": "tests/plugin/test_packaging.py::test_entry_points",
    "pytest --pyargs pytest_invariance.suites.e2e --invariance-engine vllm --invariance-url http://127.0.0.1:8000 "
    "--invariance-url-control http://127.0.0.1:8001 --invariance-records reports/records.jsonl "
    "--invariance-report reports/": E2E_ACCEPTANCE,
    "pytest --pyargs pytest_invariance.suites.e2e --invariance-engine sglang --invariance-url http://127.0.0.1:30000 "
    "--invariance-records reports/records.jsonl": E2E_ACCEPTANCE,
    'pytest --pyargs pytest_invariance.suites.ops -k "cpu and reference and matmul" '
    "--invariance-records reports/records.jsonl": "tests/plugin/test_readme_commands.py::test_per_op_command_selects_suite_rows",
    "pytest test_my_linear.py --invariance-limit 17": "tests/plugin/test_readme_example.py::test_readme_fixture_example_runs_as_pasted",
    "pytest-invariance matrix reports/records.jsonl --out reports/": "tests/plugin/test_cli.py::test_matrix_renders_and_prints_paths",
    "pytest-invariance fuzz http://127.0.0.1:8000 --engine vllm":
        "tests/fuzz/test_fuzz_cli.py::test_divergent_target_exits_1_with_its_workload_and_reproducer",
}


def readme_commands() -> list[str]:
    """Every command of the README's ``sh`` blocks: continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), re.S):
        joined = re.sub(r"\\\n\s*", "", block)
        for line in joined.splitlines():
            line = line.split(" #")[0].strip() if not line.lstrip().startswith("#") else ""
            if line:
                commands.append(" ".join(line.split()))
    return commands


def test_every_readme_command_has_a_test_that_exists() -> None:
    commands = readme_commands()
    assert commands, "README lost its commands"
    missing = [c for c in commands if c not in EXERCISED]
    assert not missing, f"README commands no test exercises (add each to EXERCISED): {missing}"
    stale = [c for c in EXERCISED if c not in commands]
    assert not stale, f"EXERCISED lists commands the README no longer has: {stale}"
    for command, node in EXERCISED.items():
        path, name = node.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), (command, node)


def test_make_targets_run_what_the_readme_says() -> None:
    """``make test`` runs the project's tests (this suite) and ``make demo`` the demo module."""
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^test: .*\n\t.*-m pytest .*tests suites", make, re.M), "make test no longer runs tests/"
    assert re.search(r"^demo: .*\n\t.*-m pytest_invariance\.demo", make, re.M), "make demo no longer runs the demo"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r"^engine = \[", pyproject, re.M), "the README's [engine] extra is gone"


def _run(command: str, timeout: float = 300) -> subprocess.CompletedProcess:
    args = command.replace('"cpu and reference and matmul"', "CPUREFMATMUL").split()
    args = ["cpu and reference and matmul" if a == "CPUREFMATMUL" else a for a in args]
    assert args[0] == "pytest"
    return subprocess.run([sys.executable, "-m", *args, "-p", "no:cacheprovider"], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)  # fmt: skip


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_e2e_command_as_written_reaches_its_url(engine: str, tmp_path: Path) -> None:
    """The README's e2e command, every option as written, against a port nothing listens on: the
    session stops at once (exit 4) naming that URL, so the options parse and the URL is the one used."""
    (command,) = [c for c in readme_commands() if f"--invariance-engine {engine}" in c]
    url = closed_port_url()
    command = re.sub(r"--invariance-url http://127\.0\.0\.1:\d+", f"--invariance-url {url}", command)
    command = command.replace("reports/", f"{tmp_path}/")
    res = _run(command, timeout=120)
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"--invariance-url {url} is unreachable" in res.stdout, res.stdout[-2000:]


def test_per_op_command_selects_suite_rows(tmp_path: Path) -> None:
    """The README's per-op command, collected: it selects CPU reference matmul rows (the rows
    themselves run in ``make test``, whose testpaths include suites/)."""
    (command,) = [c for c in readme_commands() if "suites.ops" in c]
    res = _run(command.replace("reports/", f"{tmp_path}/") + " --collect-only -q")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = [line for line in res.stdout.splitlines() if "::" in line]
    assert rows and all("matmul" in r for r in rows), res.stdout[-2000:]
