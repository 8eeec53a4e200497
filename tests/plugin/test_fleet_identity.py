"""Fleet identity: hardware classes as columns, software stacks beside each other, old records.

The ISA ATen dispatches to decides which stock CPU kernels run, so AVX2 and AVX-512 runs of one
suite are different columns; an upgrade is another stack, so it cannot silently supersede the old
stack's verdicts: the cell shows both and says it changed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic_records import CPU, H200, cpu_with_isa, h200_on, rec

from pytest_invariance.cli import main
from pytest_invariance.identity import hardware_class, stack_label, stack_of
from pytest_invariance.matrix import Matrix, build_cells, render_matrix
from pytest_invariance.recordio import append_records, read_records


def test_hardware_class_is_model_plus_isa_or_gpu_plus_capability() -> None:
    assert hardware_class(cpu_with_isa("AVX2")["hardware"]) == "Intel(R) Xeon(R) Processor · AVX2"
    amx = {**cpu_with_isa("AVX512")["hardware"], "amx": True}
    assert hardware_class(amx) == "Intel(R) Xeon(R) Processor · AVX512 AMX"
    assert hardware_class(H200["hardware"]) == "NVIDIA H200 · cc 9.0"
    assert hardware_class(CPU["hardware"]) == "AMD EPYC 9654"  # an older record: ISA unknown, never guessed


def test_avx2_and_avx512_runs_land_in_different_columns() -> None:
    cells = build_cells([rec(fingerprint=cpu_with_isa("AVX512"), verdict="divergent"),
                         rec(fingerprint=cpu_with_isa("AVX2"))])  # fmt: skip
    assert {c["hardware"]: c["verdict"] for c in cells} == {
        "Intel(R) Xeon(R) Processor · AVX512": "divergent",
        "Intel(R) Xeon(R) Processor · AVX2": "invariant",
    }


def test_old_records_read_with_unknown_identity_and_unknown_fields_pass_through(tmp_path: Path) -> None:
    old = rec(fingerprint=CPU)
    for key in ("isa", "amx"):
        old["hardware"].pop(key, None)
    for key in ("cublas", "cudnn", "nccl", "engine"):
        old["software"].pop(key, None)
    old["power"] = {"watts": 350}  # a field this version does not know (another helper's)
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    (back,), problems = read_records(path)
    assert not problems and back["power"] == {"watts": 350}
    assert back["hardware"]["isa"] is None and back["software"]["cudnn"] is None and back["software"]["engine"] is None
    md = render_matrix(Matrix.from_files([path], []), tmp_path / "m")["md"].read_text()
    assert "| AMD EPYC 9654 | cpu | 0 |" in md and "| unknown |" in md


def test_the_live_fingerprint_names_the_isa_aten_dispatches_to() -> None:
    """A real torch in a fresh interpreter: ATEN_CPU_CAPABILITY=avx2 lowers the ISA recorded."""
    code = "from pytest_invariance.hardware import fingerprint as f; h = f()['hardware']; print(h['isa'], h['amx'])"
    native = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    avx2 = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env)
    assert avx2.stdout.split()[0] == "AVX2"
    assert native.stdout.split()[0] in ("AVX512", "AVX2", "DEFAULT", "AVX512_BF16", "AMX", "ZVECTOR", "VSX")
    if native.stdout.split()[0] == "AVX512":  # this CI host: the two runs are two columns
        assert native.stdout != avx2.stdout


def test_latest_wins_within_a_stack_and_a_changed_cell_shows_both() -> None:
    old = rec(fingerprint=h200_on("2.11.0"), time="2026-01-01T00:00:00Z", run_id="r1")
    new = rec(fingerprint=h200_on("2.13.0"), verdict="divergent", time="2026-02-01T00:00:00Z", run_id="r2")
    rerun_new = rec(fingerprint=h200_on("2.13.0"), verdict="divergent", time="2026-02-02T00:00:00Z", run_id="r3")
    (cell,) = build_cells([new, old, rerun_new])
    assert cell["verdict"] == "divergent" and cell["changed"] is True and cell["records"] == 1
    assert [(s["verdict"], s["stack"].split(" · ")[0]) for s in cell["stacks"]] == [
        ("invariant", "torch 2.11.0"), ("divergent", "torch 2.13.0")]  # fmt: skip
    assert "changed across stacks: invariant on torch 2.11.0 → divergent on torch 2.13.0" in cell["evidence"]
    (same,) = build_cells([old, rec(fingerprint=h200_on("2.13.0"), time="2026-02-01T00:00:00Z", run_id="r2")])
    assert "changed" not in same and len(same["stacks"]) == 2  # two stacks that agree


def test_a_changed_cell_is_marked_in_the_glance(tmp_path: Path) -> None:
    recs = [rec(fingerprint=h200_on("2.11.0"), time="2026-01-01T00:00:00Z"),
            rec(fingerprint=h200_on("2.13.0"), verdict="divergent", time="2026-02-01T00:00:00Z")]  # fmt: skip
    md = render_matrix(recs, tmp_path)["md"].read_text()
    assert "| matmul | torch | fp32-ieee | ✘ sizeΔ |" in md


def _file(tmp_path: Path, name: str, recs: list[dict]) -> str:
    path = tmp_path / name
    append_records(path, recs)
    return str(path)


def test_compare_across_stacks_prints_changes_both_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _file(tmp_path, "torch211.jsonl", [rec(fingerprint=h200_on("2.11.0")),
                                             rec(fingerprint=h200_on("2.11.0"), oracle="run-to-run", verdict="divergent")])  # fmt: skip
    new = _file(tmp_path, "torch213.jsonl", [rec(fingerprint=h200_on("2.13.0"), verdict="divergent"),
                                             rec(fingerprint=h200_on("2.13.0"), oracle="run-to-run")])  # fmt: skip
    assert main(["compare", new, "--baseline", old]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("REGRESSION matmul / torch / fp32-ieee on NVIDIA H200 · cc 9.0, batch-size: "
                             "was invariant, now divergent")  # fmt: skip
    assert "[stack torch 2.11.0 · triton 3.6.0 · CUDA 13.0 · driver 580.65 → torch 2.13.0 ·" in out[0]
    assert out[1].startswith("CHANGED matmul / torch / fp32-ieee on NVIDIA H200 · cc 9.0, run-to-run: was divergent, now invariant")
    assert out[-1] == f"1 other changed cell(s); 1 regression(s) against {old}"
    assert main(["compare", old, "--baseline", new]) == 1  # the other way round: run-to-run lost its pass
    assert main(["compare", new, "--baseline", new]) == 0


def test_streaming_matrix_equals_the_in_memory_one(tmp_path: Path) -> None:
    recs = [rec(), rec(fingerprint=CPU, verdict="divergent"), rec(oracle="run-to-run", time="2026-03-01T00:00:00Z"),
            rec(fingerprint=h200_on("2.13.0"), verdict="divergent", run_id="r9", time="2026-04-01T00:00:00Z"),
            rec(implementation="reference", cost={"ratio": 1.5, "stock": "torch"})]  # fmt: skip
    path = Path(_file(tmp_path, "r.jsonl", recs))
    with path.open("a") as fh:
        fh.write("{not json\n")
    problems: list = []
    streamed = Matrix.from_files([path], problems)
    assert [p.line for p in problems] == [6]
    assert streamed.cells == Matrix.build(recs).cells and streamed.hardware == Matrix.build(recs).hardware


def test_stack_of_an_engine_record_names_the_engine() -> None:
    r = rec(family="engine", implementation="vllm", oracle="unique-samples")
    r["software"]["engine"] = {"name": "vllm", "version": "0.11.0", "model": "tiny"}
    assert stack_label(stack_of(r["hardware"], r["software"])).endswith("engine vllm 0.11.0 (tiny)")


def test_duckdb_and_python_passes_keep_the_same_records(tmp_path: Path) -> None:
    """The fast path (DuckDB picks the kept lines) and the pure-Python pass build the same matrix."""
    pytest.importorskip("duckdb")
    a = [rec(), rec(oracle="run-to-run", time="2026-03-01T00:00:00Z", run_id="r2"),
         rec(fingerprint=cpu_with_isa("AVX2"), verdict="divergent"), rec(nodeid="t::x", shape={"L": 9}, mode="default")]  # fmt: skip
    b = [rec(verdict="divergent", time="2026-02-01T00:00:00Z", run_id="r3"),  # supersedes a[0] on its stack
         rec(fingerprint=h200_on("2.13.0"), time="2026-04-01T00:00:00Z", run_id="r4")]  # another stack: beside it
    paths = [Path(_file(tmp_path, "a.jsonl", a)), Path(_file(tmp_path, "b.jsonl", b))]
    fast, slow = Matrix.from_files(paths, [], fast=True), Matrix.from_files(paths, [], fast=False)
    assert (fast.cells, fast.hardware, fast.plots, fast.records_read, fast.runs) == (
        slow.cells, slow.hardware, slow.plots, slow.records_read, slow.runs)  # fmt: skip
    assert fast.records_read == 6 and fast.records_kept == 5

    from pytest_invariance.matrix.duck import Fallback, kept_lines

    _, kept = kept_lines(paths)
    assert sorted(kept[0]) == [1, 2, 3] and sorted(kept[1]) == [0, 1]  # a[0] lost to b[0]
    with paths[1].open("a") as fh:
        fh.write('{"schema": "pytest-invariance.record/1"}\n')  # valid JSON, not a record
    with pytest.raises(Fallback):
        kept_lines(paths)
    problems: list = []
    Matrix.from_files(paths, problems)  # the Python pass names it
    assert [(p.line, p.message.split(" ")[0]) for p in problems] == [(3, "missing")]
