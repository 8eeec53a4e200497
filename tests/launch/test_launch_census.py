"""The census's vocabulary (reference / declined / exact / unrouted), its merge and its report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_invariance.cli import main
from pytest_invariance.launch import census_file
from pytest_invariance.launch.classify import (
    DECLINED,
    EXACT,
    REFERENCE,
    ROUTE_TARGETS,
    UNROUTED,
    maps_to,
    status_of,
)


def test_every_routed_op_of_the_mode_switch_maps_to_a_family_and_implementation() -> None:
    from pytest_invariance.reference_kernels.mode import CPU_ONLY_OPS, ROUTED_OPS

    assert set(ROUTE_TARGETS) == set(ROUTED_OPS) | set(CPU_ONLY_OPS)


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "declined", "status"),
    [
        ("aten.mm.default", (), {}, False, REFERENCE),
        ("aten.mm.default", (), {}, True, DECLINED),
        ("aten.mean.dim", (), {}, False, REFERENCE),
        ("aten.mean.default", (), {}, False, UNROUTED),  # only mean.dim is routed
        ("aten.view.default", (), {}, False, EXACT),
        ("aten.triu_.default", (), {}, False, EXACT),  # in place: the same math as triu
        ("aten.add.Tensor", (1, 2), {}, False, EXACT),
        ("aten.add.Tensor", (1, 2), {"alpha": 3}, False, UNROUTED),  # fused in the vector loop
        ("aten.pow.Tensor_Scalar", (None, 2), {}, False, EXACT),
        ("aten.pow.Tensor_Scalar", (None, 1.7), {}, False, UNROUTED),
        ("aten._softmax.default", (), {}, False, UNROUTED),
        ("aten.sum.dim_IntList", (), {}, False, UNROUTED),
        ("_C.rms_norm.default", (), {}, False, UNROUTED),  # a custom op is never exact
        ("aten.some_future_op.default", (), {}, False, UNROUTED),  # unknown: named, not skipped
    ],
)
def test_status_of_a_call(name: str, args: tuple, kwargs: dict, declined: bool, status: str) -> None:
    assert status_of(name, args, kwargs, declined) == status


def test_maps_to_names_the_family_and_what_computed_it() -> None:
    assert maps_to("aten.mm.default", REFERENCE) == ("matmul", "reference (matmul.mm)")
    assert maps_to("aten.mm.default", DECLINED) == ("matmul", "torch (the reference declined)")
    assert maps_to("aten._softmax.default", UNROUTED) == ("softmax", "torch")
    assert maps_to("_C.paged_attention_v1.default", UNROUTED) == ("-", "custom op (_C)")


def _part(folder: Path, pid: int, ops: list[dict]) -> None:
    census_file.write_atomic(folder / f"{pid}.json", {"schema": census_file.SCHEMA, "pid": pid, "argv": ["x"],
                                                      "started": "s", "flushed": "f", "flush_reason": "exit",
                                                      "calls": sum(o["calls"] for o in ops), "ops": ops})  # fmt: skip


def _row(op: str, status: str, calls: int, shape: list, first: float, last: float) -> dict:
    return {"op": op, "status": status, "calls": calls, "first": first, "last": last,
            "shapes": [{"in": [shape], "dtypes": ["bfloat16"], "device": "cpu", "calls": calls}]}  # fmt: skip


@pytest.fixture
def census(tmp_path: Path) -> Path:
    path = tmp_path / "census.json"
    folder = census_file.parts_dir(path)
    _part(folder, 11, [_row("aten.mm.default", REFERENCE, 5, [4, 8], 10, 20),
                       _row("aten.uniform_.default", UNROUTED, 2, [8, 8], 1, 2)])  # fmt: skip
    _part(folder, 12, [_row("aten.mm.default", REFERENCE, 3, [4, 8], 15, 30),
                       _row("aten.mm.default", DECLINED, 1, [3, 3], 16, 16),
                       _row("_C.rms_norm.default", UNROUTED, 7, [4, 8], 12, 25),
                       _row("aten.view.default", EXACT, 9, [4, 8], 10, 30)])  # fmt: skip
    census_file.merge(path, ["engine", "--serve"], 0)
    return path


def test_parts_of_several_processes_merge_per_op_and_shape(census: Path) -> None:
    data = json.loads(census.read_text())
    rows = {(r["op"], r["status"]): r for r in data["ops"]}
    mm = rows[("aten.mm.default", REFERENCE)]
    assert mm["calls"] == 8 and mm["shapes"] == [{"in": [[4, 8]], "dtypes": ["bfloat16"], "device": "cpu", "calls": 8}]
    assert (mm["first"], mm["last"]) == (10, 30)
    assert [p["pid"] for p in data["processes"]] == [11, 12]
    assert not census_file.parts_dir(census).exists()


def test_the_report_is_a_matrix_with_what_ran_outside_the_reference_first(
    census: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["census", str(census)]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("| ")]
    assert lines[0].startswith("| op | family | calls | shapes | most called with | unrouted | declined | reference | exact |")
    assert [ln.split(" | ")[0] for ln in lines[1:]] == ["| _C.rms_norm.default", "| aten.uniform_.default",
                                                        "| aten.mm.default", "| aten.view.default"]  # fmt: skip
    assert "| aten.mm.default | matmul | 9 | 2 | 4x8 bfloat16 | · | 1 | 8 | · | reference (matmul.mm); some calls declined |" in out
    assert "unrouted: 2 op(s): _C.rms_norm.default, aten.uniform_.default" in out


def test_a_time_window_drops_ops_called_only_outside_it_and_strict_fails_on_what_remains(
    census: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["census", str(census), "--since", "5", "--strict"]) == 1  # the custom op and the declined mm
    out = capsys.readouterr().out
    assert "uniform_" not in out and "unrouted: 1 op(s): _C.rms_norm.default" in out
    assert main(["census", str(census), "--since", "26", "--strict", "--hide-exact"]) == 0
    out = capsys.readouterr().out
    assert "aten.view.default" not in out and "exact: 1 op(s)" in out


@pytest.mark.parametrize(("content", "says"), [(None, "no such file"), ("{not json", "cannot read a census"),
                                               ('{"schema": "other/1"}', "not a launch census")])  # fmt: skip
def test_a_bad_census_file_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, says: str
) -> None:
    path = tmp_path / "c.json"
    if content is not None:
        path.write_text(content)
    assert main(["census", str(path)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
