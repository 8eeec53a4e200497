"""The DuckDB fast path builds the matrix the in-memory path builds, and hands Python what it cannot.

Why: the CLI reads a fleet's files through ``matrix.duck`` (DuckDB picks the kept lines, Python
parses only those); ``Matrix.build`` over records in memory is the reference. Each test first
makes sure the fast path really ran (``kept_lines`` did not fall back), since ``from_files``
falls back silently, then compares every rendered file byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synthetic_records import CPU, H200, cpu_with_isa, h200_on, rec

from pytest_invariance.matrix import Matrix, render_matrix
from pytest_invariance.matrix.reduce import Reducer
from pytest_invariance.recordio import read_records, scan_records

duck = pytest.importorskip("pytest_invariance.matrix.duck")
pytest.importorskip("duckdb")


def _old(r: dict) -> dict:
    """A record written before the identity fields existed."""
    for key in ("isa", "amx", "gpu_index", "gpu_uuid", "sm_count", "memory_gib"):
        r["hardware"].pop(key, None)
    for key in ("cublas", "cudnn", "nccl", "engine"):
        r["software"].pop(key, None)
    return r


def _with(r: dict, **extra) -> dict:
    r["extra"] = {**r["extra"], **extra}
    return r


def _varied() -> list[dict]:
    """A fleet in small: old records, disagreeing stacks, vacuous by construction, zoo power,
    unsupported and incomplete cells, costs, engines, localizations, text classes, ties."""
    zoo = {"config": "z1", "oracle": "batch-size", "caught": 7, "classes": 10, "missed": ["a", "b", "c"]}
    loc = {"culprit": {"module": "model.layers.0.mlp", "op": "aten.mm.default", "max_ulp": 2.0}, "step": "decode",
           "token_index": 3, "batch_size": 8}  # fmt: skip
    engine = rec(family="engine", implementation="vllm", oracle="unique-samples", mode="invariant", quantization=None,
                 nodeid="suites/e2e/test_engine.py::test_unique[tiny]",
                 evidence={"unique": {"1": 1, "8": 2}, "trials": 2, "failures": 1, "rate": 0.5})  # fmt: skip
    engine["software"]["engine"] = {"name": "vllm", "version": "0.11.0", "model": "tiny"}
    localized = _with(rec(family="engine", implementation="bundled", mode="default", verdict="divergent",
                          nodeid="suites/e2e/test_bundled.py::test_sizes"), localization=loc)  # fmt: skip
    text_classes = rec(
        nodeid="t::text-classes", evidence={**rec()["evidence"], "equivalence_classes": "{1..3} {4..8}"}
    )
    recs = [
        rec(),
        rec(
            verdict="divergent", time="2026-02-01T00:00:00Z", run_id="run-b"
        ),  # supersedes rec() on its stack
        rec(
            fingerprint=h200_on("2.13.0"), time="2026-03-01T00:00:00+00:00", run_id="run-c"
        ),  # stacks disagree
        _old(rec(fingerprint=CPU, verdict="divergent")),
        _old(rec(fingerprint=CPU, oracle="run-to-run", time="not a time")),
        rec(fingerprint=cpu_with_isa("AVX2")),
        rec(
            fingerprint={
                **cpu_with_isa("AVX512"),
                "hardware": {**cpu_with_isa("AVX512")["hardware"], "amx": True},
            }
        ),
        rec(nodeid="t::L1", shape={"L": 1}, verdict="vacuous", control={"name": "m", "diverged": False}),
        rec(nodeid="t::L256", shape={"L": 256}),
        _with(rec(oracle="batch-position"), power=zoo),
        _with(
            rec(
                fingerprint=cpu_with_isa("AVX2"),
                nodeid="t::one-key",
                shape={"L": 1},
                verdict="vacuous",
                control={"name": "m", "diverged": False},
            ),
            vacuous_by_construction="one key: v exactly",
        ),  # fmt: skip
        rec(
            verdict="unsupported",
            oracle="run-to-run",
            evidence={"error": "RuntimeError: No available kernel."},
        ),
        rec(verdict="incomplete", family="attention", evidence={"error": "timeout after 30 s", "trials": 3}),
        rec(implementation="reference", cost={"ratio": 1.5, "stock": "torch"}),
        rec(
            implementation="reference",
            cost={"ratio": 2.5, "stock": "torch"},
            nodeid="t::cost2",
            shape={"K": 8},
        ),
        engine,
        localized,
        text_classes,
        rec(mode="", quantization="", nodeid="t::empty-mode"),  # "" and null are one configuration
        rec(
            mode=None, quantization=None, nodeid="t::empty-mode", run_id="run-z"
        ),  # same time: run id breaks the tie
        rec(nodeid="t::same", run_id="run-s"),
        rec(nodeid="t::same", run_id="run-s", verdict="divergent"),  # same time and run: the later line
        rec(nodeid="t::older-shapes", shape={"L": 1}, run_id="run-1"),
        rec(nodeid="t::older-shapes", shape={"L": 2}, run_id="run-1"),
        rec(
            nodeid="t::older-shapes", shape={"L": 1}, run_id="run-2", time="2026-01-02T00:00:00Z"
        ),  # drops L 2
        rec(nodeid='t::ünïcode "quoted" \\ path', fingerprint=H200),
    ]
    # one shape in two key orders: one configuration, so the later line is its only record
    recs.append(rec(nodeid="t::key-order", shape={"b": 2, "a": 1}, run_id="run-k"))
    recs.append(rec(nodeid="t::key-order", shape={"a": 1, "b": 2}, run_id="run-k", verdict="divergent"))
    return recs


def _write(path: Path, recs: list[dict], *, blank: bool = False, trailing_newline: bool = True) -> Path:
    """Records as JSONL: keys in the order each record has them (not sorted), a blank and a
    whitespace-only line where asked, the last newline left off where asked."""
    lines = [json.dumps(r, ensure_ascii=k % 2 == 0) for k, r in enumerate(recs)]
    if blank:
        lines[1:1] = ["", "  \t"]
    path.write_text("\n".join(lines) + ("\n" if trailing_newline else ""), encoding="utf-8")
    return path


def _assert_same_matrix(paths: list[Path], out: Path) -> None:
    """The fast path ran, kept the lines the Python reducer keeps, and renders the same bytes as
    the in-memory ``Matrix.build`` over the same records."""
    total, kept = duck.kept_lines(paths)  # raises Fallback where the fast path would not run
    problems: list = []
    reducer = Reducer()
    for r, where in scan_records(paths, problems):
        reducer.add(r, where)
    assert not problems and total == reducer.read
    assert sorted((fi, off) for fi, lines in kept.items() for off, _, _ in lines.values()) == sorted(
        (e.handle.file, e.handle.offset) for e in reducer.kept()
    )
    records, _ = read_records(paths)
    fast, memory = Matrix.from_files(paths, []), Matrix.build(records)
    assert (fast.records_read, fast.records_kept, fast.runs) == (
        memory.records_read,
        memory.records_kept,
        memory.runs,
    )
    assert (fast.cells, fast.hardware, fast.plots, fast.row_costs) == (memory.cells, memory.hardware, memory.plots,
                                                                        memory.row_costs)  # fmt: skip
    a, b = render_matrix(fast, out / "fast"), render_matrix(memory, out / "memory")
    for kind in a:
        assert a[kind].read_bytes() == b[kind].read_bytes(), kind


def test_fast_path_builds_the_in_memory_matrix_of_a_varied_fleet(tmp_path: Path) -> None:
    recs = _varied()
    paths = [_write(tmp_path / "a.jsonl", recs[:14], blank=True),
             _write(tmp_path / "b.jsonl", recs[14:], trailing_newline=False),
             _write(tmp_path / "empty.jsonl", [])]  # fmt: skip
    (tmp_path / "empty.jsonl").write_text("")
    _assert_same_matrix(paths, tmp_path)
    cells = Matrix.from_files(paths, []).cells
    assert any(c.get("changed") for c in cells) and any(c.get("vacuous_by_construction") for c in cells)
    assert any(c.get("power") for c in cells) and {c["verdict"] for c in cells} >= {
        "unsupported",
        "incomplete",
    }


_VARIANTS = [rec(), rec(verdict="divergent"), rec(oracle="run-to-run"), rec(fingerprint=CPU),
             _old(rec(fingerprint=CPU, verdict="divergent")), rec(fingerprint=cpu_with_isa("AVX2")),
             rec(verdict="vacuous", control={"name": "m", "diverged": False}),
             rec(implementation="reference", cost={"ratio": 1.25, "stock": "torch"})]  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(_VARIANTS) - 1), st.sampled_from(["t::a", "t::b"]),
                          st.sampled_from([{"L": 1}, {"L": 2}]), st.integers(0, 2), st.sampled_from(["r1", "r2", "r3"]),
                          st.sampled_from(["2.11.0", "2.13.0"]), st.booleans()), min_size=1, max_size=30))  # fmt: skip
def test_fast_path_keeps_what_python_keeps_for_any_fleet(
    tmp_path_factory: pytest.TempPathFactory, draws: list
) -> None:
    """Few node ids, shapes, times, runs and stacks, so that ties and supersessions are common."""
    tmp = tmp_path_factory.mktemp("fleet")
    files: list[list[dict]] = [[], []]
    for variant, nodeid, shape, day, run, torch, second in draws:
        r = json.loads(json.dumps(_VARIANTS[variant]))
        r.update(nodeid=nodeid, shape=shape, time=f"2026-01-0{1 + day}T00:00:00Z", run_id=run)
        r["software"]["torch"] = torch
        files[second].append(r)
    paths = [_write(tmp / f"{k}.jsonl", recs) for k, recs in enumerate(files) if recs]
    _assert_same_matrix(paths, tmp)


def _line(**change) -> str:
    r = rec()
    for key, value in change.items():
        if value is KeyError:
            r.pop(key)
        elif "." in key:
            section, field = key.split(".")
            r[section][field] = value
        else:
            r[key] = value
    return json.dumps(r)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param('{"schema": "pytest-invariance.record/1"}', id="missing-fields"),
        pytest.param(_line(dtype=KeyError), id="missing-dtype"),
        pytest.param(_line(schema="pytest-invariance.record/1.0/2"), id="schema-with-slash"),
        pytest.param(_line(schema="pytest-invariance.record/2"), id="schema-2"),
        pytest.param(_line(**{"hardware.name": 7}), id="hardware-name-number"),
        pytest.param(_line(control="mutant"), id="control-string"),
        pytest.param(_line(**{"evidence.first": [1]}), id="first-list"),
        pytest.param(_line(**{"evidence.equivalence_classes": [[1, 2]]}), id="classes-not-spans"),
        pytest.param(_line(extra={"localization": {"step": "decode"}}), id="localization-bad"),
        pytest.param(_line(verdict="passed"), id="unknown-verdict"),
        pytest.param(_line(family=""), id="empty-family"),
        pytest.param(_line(nodeid=7), id="nodeid-number: a record Python keys on, the fast path cannot"),
        pytest.param(_line(mode=0), id="mode-zero: falsy, not null"),
        pytest.param(_line(run_id=3), id="run-id-number"),
        pytest.param(_line() + "\r", id="carriage-return"),
        pytest.param("{not json", id="not-json"),
    ],
)
def test_what_the_fast_path_cannot_vouch_for_goes_to_python(tmp_path: Path, line: str) -> None:
    """The fast path raises ``Fallback``; ``from_files`` then gives what the Python pass gives."""
    path = tmp_path / "r.jsonl"
    path.write_text(
        _line(nodeid="t::other") + "\n" + line + "\n" + _line(run_id="run-z") + "\n", encoding="utf-8"
    )
    with pytest.raises(duck.Fallback):
        duck.kept_lines([path])
    problems: list = []
    slow_problems: list = []
    streamed, slow = Matrix.from_files([path], problems), Matrix.from_files([path], slow_problems, fast=False)
    assert (streamed.cells, streamed.records_read, problems) == (slow.cells, slow.records_read, slow_problems)


def test_a_line_not_utf8_goes_to_python(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(_line().encode() + b"\n" + b'{"a": "\xff"}\n')
    with pytest.raises(duck.Fallback):
        duck.kept_lines([path])
    problems: list = []
    assert Matrix.from_files([path], problems).records_read == 1 and [p.line for p in problems] == [2]
