"""Records files: round trip, append-only durability, and forgiving reads of damaged files."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic_records import divergent_evidence, rec

from pytest_invariance.recordio import Problem, RecordFileError, append_records, read_records

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=16,
)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.fixed_dictionaries(
                {
                    "evidence": st.dictionaries(st.text(max_size=8), json_values, max_size=4),
                    "shape": json_values,
                    "extra": st.dictionaries(st.text(max_size=8), json_values, max_size=3),
                    "nodeid": st.text(min_size=1, max_size=30),
                    "verdict": st.sampled_from(
                        ["invariant", "divergent", "vacuous", "incomplete", "unsupported"]
                    ),
                }
            ),
            max_size=3,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_records_round_trip_through_jsonl(batches: list[list[dict]]) -> None:
    """Whatever JSON a record carries comes back equal, in order, across several appends."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "deep" / "records.jsonl"
        written = []
        for batch in batches:
            records = []
            for fields in batch:
                r = rec(verdict=fields["verdict"], nodeid=fields["nodeid"], shape=fields["shape"])
                r["evidence"] = fields["evidence"]
                r["extra"] = fields["extra"]
                records.append(r)
            assert append_records(path, records) == len(records)
            written += records
        if not written:
            assert not path.exists()
            return
        got, problems = read_records([path])
        assert problems == []
        assert got == written


def test_one_line_per_record_and_append_only(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    append_records(path, [rec(), rec(oracle="run-to-run")])
    first = path.read_bytes()
    append_records(path, [rec(verdict="divergent")])
    data = path.read_bytes()
    assert data.startswith(first)
    lines = data.decode().splitlines()
    assert len(lines) == 3 and all(
        json.loads(line)["schema"] == "pytest-invariance.record/1" for line in lines
    )


def _write_three_with_garbage(path: Path, garbage: bytes, at: int) -> None:
    lines = [json.dumps(r).encode() for r in (rec(), rec(oracle="run-to-run"), rec(verdict="divergent"))]
    lines.insert(at, garbage)
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_corrupt_line_is_reported_with_line_number_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    _write_three_with_garbage(path, b'{"schema": "pytest-invariance.record/1", "family": ', at=1)
    records, problems = read_records([path])
    assert [r["oracle"] for r in records] == ["batch-size", "run-to-run", "batch-size"]
    assert len(problems) == 1
    p = problems[0]
    assert (p.path, p.line) == (str(path), 2)
    assert str(p).startswith(f"{path}:2: invalid JSON (")
    assert str(p).endswith("line skipped")


def test_truncated_last_line_then_next_append_still_readable(tmp_path: Path) -> None:
    """An interrupted write leaves half a line; the next run's records must not be glued onto it."""
    path = tmp_path / "records.jsonl"
    append_records(path, [rec(), rec(oracle="run-to-run")])
    whole = json.dumps(rec(verdict="divergent"))
    with open(path, "a") as f:
        f.write(whole[: len(whole) // 2])
    records, problems = read_records(path)
    assert len(records) == 2
    assert [(p.line, p.message.split(" (")[0]) for p in problems] == [(3, "invalid JSON")]
    append_records(path, [rec(oracle="chunking")])
    records, problems = read_records(path)
    assert [r["oracle"] for r in records] == ["batch-size", "run-to-run", "chunking"]
    assert [p.line for p in problems] == [3]


@pytest.mark.parametrize(
    ("mutate", "expect"),
    [
        (lambda r: r.update(schema="pytest-invariance.record/2"), "unsupported schema version"),
        (lambda r: r.update(schema="pytest-invariance.record/1.4"), None),
        (lambda r: r.update(schema="something-else/1"), "unknown schema"),
        (lambda r: r.pop("schema"), "no schema field"),
        (lambda r: r.pop("verdict"), "missing field(s) verdict"),
        (lambda r: r.update(verdict="flaky"), "unknown verdict 'flaky'"),
        (lambda r: r.update(hardware={"kind": "cpu"}), "hardware has no name"),
        (lambda r: r.update(family=""), "field 'family' is not a non-empty string"),
        (lambda r: r.update(evidence=[1, 2]), "field 'evidence' is not an object"),
        (lambda r: r.update(control="mutant"), "field 'control' is not an object or null"),
        (lambda r: r["evidence"].update(first=3), "field 'first' is not an object or null"),
        (lambda r: r["evidence"].update(equivalence_classes=[[[9, 1]]]), "evidence.equivalence_classes"),
    ],
)
def test_schema_check(tmp_path: Path, mutate, expect: str | None) -> None:
    bad = rec()
    mutate(bad)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(rec()) + "\n\n" + json.dumps(bad) + "\n")
    records, problems = read_records([path])
    if expect is None:  # a minor version of the same major is readable
        assert len(records) == 2 and problems == []
    else:
        assert len(records) == 1
        assert len(problems) == 1 and problems[0].line == 3 and expect in problems[0].message


def test_not_an_object_and_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _write_three_with_garbage(path, b"[1, 2, 3]", at=0)
    with open(path, "ab") as f:
        f.write(b'{"x": "\xff\xfe"}\n')
    records, problems = read_records([path])
    assert len(records) == 3
    assert [(p.line, p.message.split(" (")[0]) for p in problems] == [
        (1, "not a JSON object"),
        (5, "not UTF-8"),
    ]


def test_problems_name_each_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    append_records(a, [rec()])
    b.write_text("nope\n" + json.dumps(rec(oracle="run-to-run")) + "\n")
    records, problems = read_records([a, b])
    assert [r["oracle"] for r in records] == ["batch-size", "run-to-run"]
    assert problems == [Problem(str(b), 1, problems[0].message)]


def test_missing_or_directory_raises_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(RecordFileError, match="not found: .*missing.jsonl"):
        read_records([tmp_path / "missing.jsonl"])
    with pytest.raises(RecordFileError, match="is a directory"):
        read_records([tmp_path])


def test_unserializable_record_leaves_file_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    append_records(path, [rec()])
    before = path.read_bytes()
    bad = rec()
    bad["evidence"] = {"max_ulp": float("nan")}
    with pytest.raises(ValueError, match="not plain JSON"):
        append_records(path, [rec(oracle="run-to-run"), bad])
    assert path.read_bytes() == before


def test_killed_writer_keeps_records_written_before(tmp_path: Path) -> None:
    """A process killed right after append_records returns has still persisted the records."""
    path = tmp_path / "r.jsonl"
    code = (
        "import json, os, signal, sys; sys.path.insert(0, sys.argv[2]);"
        "from synthetic_records import rec; from pytest_invariance.recordio import append_records;"
        "append_records(sys.argv[1], [rec(), rec(verdict='divergent')]);"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(Path(__file__).parents[1])], timeout=60)
    assert proc.returncode != 0
    records, problems = read_records(path)
    assert [r["verdict"] for r in records] == ["invariant", "divergent"] and problems == []


def test_divergent_evidence_survives(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    r = rec(verdict="divergent", evidence=divergent_evidence(first_n=9, max_ulp="inf"))
    append_records(path, [r])
    (got,), _ = read_records(path)
    assert got["evidence"]["first"]["batch_size"] == 9 and got["evidence"]["max_ulp"] == "inf"


def test_records_are_typed_once_when_read(tmp_path: Path) -> None:
    """An older record (classes as text, no ``extra``) reads back in today's shape."""
    old = rec(evidence={"failures": 1, "trials": 3, "first": None})
    old["evidence"]["equivalence_classes"] = "{1..7} {8..33}"
    del old["extra"]
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    (got,), problems = read_records(path)
    assert problems == []
    assert got["evidence"]["equivalence_classes"] == [[[1, 7]], [[8, 33]]] and got["extra"] == {}
