"""The plugin seen from outside: options, markers, records and their flow, with and without xdist."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

XDIST = [[], ["-n", "2"]]
XDIST_IDS = ["serial", "xdist"]

SUITE = '''
import pytest, torch, torch.nn.functional as F

W = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))

def rows(seed):
    from pytest_invariance.oracles.inputs import rows_pool
    return rows_pool(40, (256,), seed)

def splitk(x):
    splits = 4 if x.shape[0] < 16 else 1
    k = x.shape[1] // splits
    out = F.linear(x[:, :k], W[:, :k])
    for i in range(1, splits):
        out = out + F.linear(x[:, i * k:(i + 1) * k], W[:, i * k:(i + 1) * k])
    return out

def rowwise(x):
    return torch.stack([F.linear(r[None], W)[0] for r in x])

@pytest.mark.family("matmul")
def test_mutant_divergent(invariance):
    invariance.batch(splitk, rows, family="matmul", implementation="mutant:splitk",
                     quantization="fp32-ieee", expect="divergent", batch_sizes=[1, 2, 17, 33])

def test_rowwise_invariant(invariance):
    invariance.batch(rowwise, rows, family="matmul", implementation="rowwise", quantization="fp32-ieee",
                     control=splitk, control_name="mutant:splitk", batch_sizes=[1, 2, 17, 33])

def test_rowwise_position(invariance):
    invariance.position(rowwise, rows, family="matmul", implementation="rowwise", quantization="fp32-ieee",
                        control=splitk, control_name="mutant:splitk", batch_sizes=[2, 17, 33])

def test_uncontrolled_is_vacuous(invariance):
    invariance.run_to_run(rowwise, rows, family="matmul", implementation="rowwise", quantization="fp32-ieee")

@pytest.mark.gpu
def test_needs_gpu(invariance):
    raise AssertionError("must not run without CUDA")
'''


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _key(r: dict) -> tuple:
    return (r["nodeid"], r["implementation"], r["oracle"], r["verdict"])


@pytest.mark.parametrize("xdist", XDIST, ids=XDIST_IDS)
def test_verdicts_records_and_summary(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(test_suite=SUITE)
    out = pytester.path / "rec.jsonl"
    result = pytester.runpytest(*xdist, f"--invariance-records={out}", "-rs")
    result.assert_outcomes(passed=3, failed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "*expected invariant, got vacuous*run-to-run*",
        "*no positive control was run*",
        "*invariance summary*",
        "matmul / mutant:splitk*divergent 1*first N=*",
        "*needs a CUDA GPU*",
    ])
    recs = _records(out)
    assert Counter(_key(r) for r in recs) == Counter({
        ("test_suite.py::test_mutant_divergent", "mutant:splitk", "batch-size", "divergent"): 1,
        ("test_suite.py::test_rowwise_invariant", "rowwise", "batch-size", "invariant"): 1,
        ("test_suite.py::test_rowwise_position", "rowwise", "batch-position", "invariant"): 1,
        ("test_suite.py::test_uncontrolled_is_vacuous", "rowwise", "run-to-run", "vacuous"): 1,
    })
    assert len({r["run_id"] for r in recs}) == 1
    for r in recs:
        assert r["schema"] == "pytest-invariance.record/1"
        assert r["hardware"]["name"]
        assert r["contract"] == "bitwise"
        assert r["extra"]["test_seconds"] >= 0  # what the check cost, failed checks included
    invariant = next(r for r in recs if r["verdict"] == "invariant" and r["oracle"] == "batch-size")
    assert invariant["control"] == {**invariant["control"], "name": "mutant:splitk", "diverged": True}


def test_same_multiset_with_and_without_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    a, b = pytester.path / "a.jsonl", pytester.path / "b.jsonl"
    pytester.runpytest(f"--invariance-records={a}")
    pytester.runpytest("-n", "2", f"--invariance-records={b}")
    strip = lambda r: (_key(r), json.dumps(r["evidence"], sort_keys=True))  # noqa: E731
    assert Counter(map(strip, _records(a))) == Counter(map(strip, _records(b)))


@pytest.mark.parametrize("xdist", XDIST, ids=XDIST_IDS)
def test_options_in_help(pytester: pytest.Pytester, xdist: list[str]) -> None:
    result = pytester.runpytest(*xdist, "--help")
    for opt in ("--invariance-url", "--invariance-engine", "--invariance-records", "--invariance-report",
                "--invariance-trials", "--invariance-profile", "--invariance-expect"):
        result.stdout.fnmatch_lines([f"*{opt}*"])


@pytest.mark.parametrize("xdist", XDIST, ids=XDIST_IDS)
def test_markers_registered(pytester: pytest.Pytester, xdist: list[str]) -> None:
    result = pytester.runpytest(*xdist, "--markers")
    for m in ("gpu:", "e2e:", "inverse:", "perf:", "family(name):", "quant(name):"):
        result.stdout.fnmatch_lines([f"@pytest.mark.{m}*"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--invariance-profile=huge"], "*--invariance-profile: invalid choice: 'huge'*"),
        (["--invariance-trials=0"], "*--invariance-trials: expected a positive integer, got '0'*"),
        (["--invariance-engine=tgi"], "*--invariance-engine: invalid choice: 'tgi'*"),
        (["--invariance-expect=missing.json"], "*--invariance-expect: no such file: missing.json*"),
    ],
)
@pytest.mark.parametrize("xdist", XDIST, ids=XDIST_IDS)
def test_bad_option_values_fail_with_one_line(pytester: pytest.Pytester, xdist, args, message) -> None:
    pytester.makepyfile(test_ok="def test_ok(): pass")
    result = pytester.runpytest(*xdist, *args)
    assert result.ret != 0
    result.stderr.fnmatch_lines([message])


def test_bad_ini_value(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ninvariance_profile = medium\n")
    pytester.makepyfile(test_ok="def test_ok(): pass")
    result = pytester.runpytest()
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*invariance_profile: unknown profile 'medium'*"])


def test_seed_ini_key_reaches_the_fixture_and_a_bad_one_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ninvariance_seed = 41\n")
    pytester.makepyfile(test_seed="def test_seed(invariance):\n    assert invariance.seed == 41\n")
    pytester.runpytest().assert_outcomes(passed=1)
    assert pytester.runpytest("--invariance-seed=7").ret != 0  # the option wins over the ini key
    pytester.makeini("[pytest]\ninvariance_seed = forty\n")
    result = pytester.runpytest()
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*invariance_seed: expected an integer, got 'forty'*"])


@pytest.mark.parametrize("xdist", XDIST, ids=XDIST_IDS)
def test_interrupted_run_keeps_records(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(test_a=SUITE.replace("@pytest.mark.gpu", "@pytest.mark.skip"))
    pytester.makepyfile(test_b="def test_stop():\n    raise KeyboardInterrupt\n")
    out = pytester.path / "rec.jsonl"
    result = pytester.runpytest_subprocess(*xdist, "-p", "no:randomly", f"--invariance-records={out}")
    assert result.ret != 0
    assert len(_records(out)) == 4


@pytest.mark.parametrize("xdist", XDIST, ids=XDIST_IDS)
def test_header_names_hardware(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(test_ok="def test_ok(): pass")
    result = pytester.runpytest(*xdist)
    result.stdout.fnmatch_lines(["invariance: * | profile quick, trials 3, run *"])


def test_a_plain_session_does_not_import_torch(pytester: pytest.Pytester) -> None:
    """Header, options and hooks of a non-quiet session in an unrelated project stay torch-free."""
    pytester.makepyfile(test_plain="import sys\ndef test_plain():\n    assert 'torch' not in sys.modules\n")
    pytester.runpytest_subprocess("-v").assert_outcomes(passed=1)


def test_plugin_import_does_not_import_torch() -> None:
    code = "import sys, pytest_invariance.plugin; assert 'torch' not in sys.modules, 'torch imported'; " \
           "assert 'pandas' not in sys.modules, 'pandas imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("xdist", XDIST, ids=XDIST_IDS)
def test_hardware_fixture(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(test_hw="def test_hw(hardware):\n    assert hardware['hardware']['name']\n"
                                "    assert hardware['software']['python']\n")
    pytester.runpytest(*xdist).assert_outcomes(passed=1)


@pytest.mark.parametrize("xdist", XDIST, ids=XDIST_IDS)
def test_report_dir_and_expect_regression(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(test_suite=SUITE)
    report = pytester.path / "report"
    first = pytester.runpytest(*xdist, f"--invariance-report={report}")
    first.assert_outcomes(passed=3, failed=1, skipped=1)
    for name in ("matrix.md", "matrix.html", "matrix.csv", "matrix.json"):
        assert (report / name).is_file(), name
    # The same suite again: nothing that was invariant regressed.
    again = pytester.runpytest(*xdist, f"--invariance-expect={report / 'matrix.json'}")
    assert "REGRESSION" not in again.stdout.str()
    # Now the row-wise kernel silently turns batch-variant: the expected matrix catches it.
    pytester.makepyfile(test_suite=SUITE.replace("def rowwise(x):\n    return", "def rowwise(x):\n    return splitk(x)\n    return"))
    broken = pytester.runpytest(*xdist, f"--invariance-expect={report / 'matrix.json'}")
    assert broken.ret != 0
    broken.stdout.fnmatch_lines(["REGRESSION: *rowwise*invariant*"])


def test_unreadable_expect_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    bad = pytester.path / "m.json"
    bad.write_text("{not json")
    pytester.makepyfile(test_ok="def test_ok(): pass")
    result = pytester.runpytest(f"--invariance-expect={bad}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--invariance-expect: *m.json*"])
