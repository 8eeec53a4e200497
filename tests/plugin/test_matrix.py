"""The compatibility matrix from schema-valid records, and regressions against an expected one."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import xml.dom.minidom
from pathlib import Path

import pandas as pd
import pytest
from matrix_html import blob
from synthetic_records import CPU, divergent_evidence, rec

from pytest_invariance.expect import ExpectedMatrixError, compare_with_expected
from pytest_invariance.matrix import build_cells, divergence_series, render_matrix


def _records() -> list[dict]:
    return [
        rec(verdict="divergent"),
        rec(oracle="run-to-run"),
        rec(implementation="reference", cost={"ratio": 0.93, "stock": "torch", "implementation_ms": 1.0}),
        rec(implementation="reference", oracle="batch-position"),
        rec(fingerprint=CPU, verdict="divergent", evidence=divergent_evidence(first_n=8, max_ulp=1, failures=5)),
        rec(family="rmsnorm", verdict="vacuous", control={"name": "mutant:rowsplit", "diverged": False}),
        rec(
            family="engine",
            implementation="bundled",
            mode="default",
            oracle="unique-samples",
            verdict="divergent",
            quantization="bf16",
            evidence={"unique": [1, 2, 5], "concurrency": [1, 8, 64], "failures": 2, "trials": 3},
        ),
        rec(family="engine", implementation="bundled", mode="invariant", oracle="unique-samples", quantization="bf16",
            evidence={"unique": [1, 1, 1], "concurrency": [1, 8, 64], "failures": 0, "trials": 3}),
    ]  # fmt: skip


def _cell(cells: list[dict], **key) -> dict:
    (hit,) = [c for c in cells if all(c[k] == v for k, v in key.items())]
    return hit


def test_cells_carry_verdict_and_evidence() -> None:
    cells = build_cells(_records())
    h200 = dict(family="matmul", implementation="torch", hardware="NVIDIA H200 · cc 9.0")
    bs = _cell(cells, oracle="batch-size", **h200)
    assert bs["verdict"] == "divergent"
    assert bs["evidence"] == "batch-size: divergent (first N=16, max ULP 3, max abs 1e-06, 4/5 trials)"
    # a pass carries the weakest evidence behind it: its clean trials and the 95% bound on its rate
    assert _cell(cells, oracle="run-to-run", **h200)["evidence"] == "run-to-run: invariant (weakest 5/5 clean, rate < 0.43)"
    cpu = _cell(cells, family="matmul", implementation="torch", hardware="AMD EPYC 9654")
    assert cpu["evidence"] == "batch-size: divergent (first N=8, max ULP 1, max abs 1e-06, 5/5 trials)"
    ref = _cell(cells, implementation="reference", oracle="batch-size")
    assert ref["cost"]["text"] == "0.93× stock" and ref["cost"]["ratio"] == 0.93
    vac = _cell(cells, family="rmsnorm")
    assert vac["evidence"] == "batch-size: vacuous (control mutant:rowsplit did not diverge)"
    # an engine's mode is part of the row, so invariant and default mode do not merge
    assert {c["mode"]: c["verdict"] for c in cells if c["family"] == "engine"} == {
        "default": "divergent",
        "invariant": "invariant",
    }


def test_latest_record_wins_and_order_does_not_matter(tmp_path: Path) -> None:
    old = rec(verdict="divergent", time="2026-01-01T00:00:00+00:00", run_id="r1")
    new = rec(verdict="invariant", time="2026-03-01T00:00:00Z", run_id="r2")
    other_hw = rec(fingerprint=CPU, verdict="divergent", time="2025-01-01T00:00:00+00:00")
    for order in ([old, new, other_hw], [new, other_hw, old]):
        cells = build_cells(order)
        assert {c["hardware"]: c["verdict"] for c in cells} == {
            "NVIDIA H200 · cc 9.0": "invariant",
            "AMD EPYC 9654": "divergent",
        }
        assert all(c["records"] == 1 for c in cells)
    a = render_matrix([old, new, other_hw], tmp_path / "a")
    b = render_matrix([other_hw, old, new], tmp_path / "b")
    for ext in ("md", "full-md", "html", "csv", "json"):
        assert a[ext].read_bytes() == b[ext].read_bytes(), ext


def test_a_later_run_of_a_test_supersedes_its_older_shapes() -> None:
    """A suite whose defaults changed leaves no stale shape behind; one run's shapes all stay."""
    old = rec(verdict="vacuous", shape={"max_tokens": 16}, nodeid="t::cache", time="2026-01-01T00:00:00Z", run_id="r1")
    new = [rec(shape={"max_tokens": n}, nodeid="t::cache", time=f"2026-02-01T00:00:0{i}Z", run_id="r2")
           for i, n in enumerate((48, 64))]  # fmt: skip
    (cell,) = build_cells([old, *new])
    assert cell["verdict"] == "invariant" and cell["records"] == 2
    other_node = rec(verdict="divergent", shape={"max_tokens": 16}, nodeid="t::other", run_id="r1")
    (cell,) = build_cells([old, *new, other_node])  # another node's older run is not superseded
    assert cell["verdict"] == "divergent" and cell["records"] == 3


def test_worst_verdict_across_shapes_decides_the_cell() -> None:
    recs = [
        rec(shape={"K": 4096, "N": 4096}, nodeid="t::a"),
        rec(shape={"K": 4096, "N": 14336}, nodeid="t::b", verdict="divergent",
            evidence=divergent_evidence(first_n=32, max_ulp=7)),
        rec(shape={"K": 1024, "N": 1024}, nodeid="t::c"),
    ]  # fmt: skip
    (cell,) = build_cells(recs)
    assert cell["verdict"] == "divergent" and cell["records"] == 3
    assert (
        cell["evidence"] == "batch-size: divergent (first N=32, max ULP 7, max abs 1e-06, 4/5 trials, 1/3 configs divergent)"
    )
    assert cell["nodeid"] == "t::b"


def test_glance_markdown_puts_real_implementations_first_and_controls_apart(tmp_path: Path) -> None:
    paths = render_matrix([*_records(), rec(implementation="mutant:splitk", verdict="divergent")], tmp_path)
    md = paths["md"].read_text()
    real, controls = md.index("## Real implementations"), md.index("## Positive controls")
    assert real < controls
    assert "| matmul | torch | fp32-ieee | ✘ size | ✘ size ✔ rerun |" in md[real:controls]
    assert "| matmul | reference | fp32-ieee |  | ✔ size ✔ pos |" in md[real:controls]  # blank: not run
    assert "| engine | bundled [default] | bf16 |" in md[controls:]  # designed to diverge: a control
    assert "| matmul | mutant:splitk | fp32-ieee |  | ✘ size |" in md[controls:]
    assert "✔ invariant · ✘ divergent · ∅ vacuous" in md and "size = batch-size" in md
    assert "http://" not in md


def test_render_writes_five_files_with_cells(tmp_path: Path) -> None:
    paths = render_matrix(_records(), tmp_path / "out")
    assert sorted(paths) == ["csv", "full-md", "html", "json", "md"]
    assert all(p.is_file() and p.parent == tmp_path / "out" for p in paths.values())

    md = paths["full-md"].read_text()
    assert "Contract(s): **bitwise**" in md
    assert "| family | implementation | quantization | AMD EPYC 9654 | NVIDIA H200 · cc 9.0 |" in md
    row = next(line for line in md.splitlines() if line.startswith("| matmul | torch |"))
    assert (
        "**divergent**: batch-size: divergent (first N=16, max ULP 3, max abs 1e-06, 4/5 trials) · run-to-run: invariant"
        in row
    )
    ref = next(line for line in md.splitlines() if line.startswith("| matmul | reference |"))
    cols = [c.strip() for c in ref.strip("|").split(" | ")]
    assert cols[3] == "–"  # reference was not run on the CPU column
    assert cols[4] == (
        "**invariant**: batch-size: invariant (weakest 5/5 clean, rate < 0.43) · batch-position: invariant (weakest 5/5 clean, rate < 0.43)"
        " · cost: invariant, 0.93× stock"
    )
    assert "| engine | bundled [default] | bf16 |" in md

    doc = json.loads(paths["json"].read_text())
    assert doc["schema"] == "pytest-invariance.matrix/1" and doc["contracts"] == ["bitwise"]
    assert len(doc["cells"]) == len(build_cells(_records()))
    keys = {"family", "implementation", "quantization", "hardware", "oracle", "verdict", "evidence", "cost"}
    assert all(keys <= set(c) for c in doc["cells"])
    assert doc["hardware"]["NVIDIA H200 · cc 9.0"]["hardware"]["sm_count"] == 132

    csv = pd.read_csv(paths["csv"])
    assert len(csv) == len(doc["cells"])
    hit = csv[(csv.family == "matmul") & (csv.implementation == "reference") & (csv.oracle == "batch-size")]
    assert hit.iloc[0]["cost_ratio"] == 0.93 and hit.iloc[0]["contract"] == "bitwise"


def test_html_is_self_contained_coloured_and_has_plots(tmp_path: Path) -> None:
    html = render_matrix(_records(), tmp_path)["html"].read_text()
    assert "<link" not in html and "src=" not in html  # one file: inline CSS, SVG and filter script
    assert ".v-divergent { background: #ffcdd2; }" in html
    cell = re.search(r'<td class="cell v-divergent" data-hw="NVIDIA H200 · cc 9.0"><details data-c="(\d+)">'
                     r"<summary>✘ size ✔ rerun</summary></details></td>", html)  # fmt: skip
    assert cell is not None
    doc = blob(html)  # the evidence is loaded when the cell opens, not inlined
    assert doc["cells"][int(cell.group(1))].startswith('<div class="o v-divergent">batch-size: divergent (first N=16')
    assert '<td class="cell v-vacuous"' in html
    assert '<details class="controls"><summary>Positive controls</summary>' in html
    assert "<svg" not in html  # plots too: one folded group per hardware class
    assert '<details class="plots-hw" data-hw="NVIDIA H200 · cc 9.0" data-plots="real|NVIDIA H200 · cc 9.0">' in html
    svgs = [svg for group in doc["plots"].values() for svg in re.findall(r"<svg.*?</svg>", group, re.S)]
    for svg in svgs:
        xml.dom.minidom.parseString(svg)  # well-formed
    titles = " ".join(svgs)
    assert "NVIDIA H200 · cc 9.0: probe row differs from batch size 1 at N" in titles
    assert "NVIDIA H200 · cc 9.0: first differing batch size (1 divergent records)" in titles
    assert "AMD EPYC 9654: first differing batch size (1 divergent records)" in titles
    assert "batch sizes grouped by bit-identical probe output" in titles
    assert "Unique completions of one prompt" in titles
    assert "bundled [default] · unique-samples" in titles  # in the NVIDIA H200 · cc 9.0 group
    assert "N=32: 1/1 configuration(s) differ" in titles


def test_divergence_series_counts_configs() -> None:
    recs = [
        rec(verdict="divergent", nodeid="t::a", evidence=divergent_evidence(first_n=16)),
        rec(verdict="divergent", nodeid="t::b", evidence=divergent_evidence(first_n=8)),
    ]
    ((label, pts),) = divergence_series(recs)
    assert label == "matmul · torch · fp32-ieee · NVIDIA H200 · cc 9.0 · batch-size"
    # a: differs at 16, 32, 64 (classes edges 1, 15, 16, 64); b: differs at 8, 16, 32 (edges 1, 7, 8, 32)
    assert pts[16] == (2, 2) and pts[32] == (2, 2) and pts[64] == (1, 1) and pts[8] == (1, 1)
    assert pts[1] == (0, 2) and pts[15] == (0, 1)


def test_every_output_prints_a_non_default_contract(tmp_path: Path) -> None:
    paths = render_matrix([rec(contract="ulp<=2"), rec(oracle="run-to-run")], tmp_path)
    assert "Contract(s): **bitwise, ulp<=2**" in paths["md"].read_text()
    assert "batch-size: invariant (weakest 5/5 clean, rate < 0.43) [ulp<=2]" in paths["full-md"].read_text()
    assert "<b>bitwise, ulp&lt;=2</b>" in paths["html"].read_text()
    assert json.loads(paths["json"].read_text())["contracts"] == ["bitwise", "ulp<=2"]
    assert sorted(pd.read_csv(paths["csv"])["contract"]) == ["bitwise", "ulp<=2"]


def test_empty_records_render_an_empty_matrix(tmp_path: Path) -> None:
    paths = render_matrix([], tmp_path)
    assert "No records." in paths["md"].read_text() and "No records." in paths["html"].read_text()
    assert json.loads(paths["json"].read_text())["cells"] == []


def test_importing_matrix_cli_expect_does_not_import_torch() -> None:
    code = (
        "import sys; import pytest_invariance.cli, pytest_invariance.matrix, pytest_invariance.expect,"
        " pytest_invariance.recordio; print('torch' in sys.modules, 'pandas' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["False", "False"]


# --------------------------------------------------------------------------- expect
def _expected(tmp_path: Path, records: list[dict]) -> Path:
    return render_matrix(records, tmp_path / "expected")["json"]


def test_invariant_to_divergent_is_a_regression(tmp_path: Path) -> None:
    expected = _expected(
        tmp_path, [rec(), rec(oracle="run-to-run", verdict="divergent"), rec(family="rmsnorm")]
    )
    now = [
        rec(verdict="divergent"),  # invariant -> divergent: regression
        rec(oracle="run-to-run"),  # divergent -> invariant: an improvement
        rec(family="softmax", verdict="divergent"),  # not in the expected matrix
    ]  # rmsnorm not run this time: not a regression either
    regressions = compare_with_expected(now, expected)
    assert [str(r) for r in regressions] == [
        "matmul / torch / fp32-ieee on NVIDIA H200 · cc 9.0, batch-size: was invariant, now divergent — "
        "batch-size: divergent (first N=16, max ULP 3, max abs 1e-06, 4/5 trials)"
    ]
    # cells work as input too
    assert compare_with_expected(build_cells(now), expected) == regressions


def test_vacuous_or_incomplete_after_invariant_is_a_regression(tmp_path: Path) -> None:
    expected = _expected(tmp_path, [rec(), rec(oracle="run-to-run")])
    now = [
        rec(verdict="vacuous", control={"name": "mutant:splitk-matmul", "diverged": False}),
        rec(oracle="run-to-run", verdict="incomplete", evidence={"error": "CUDA error: out of memory"}),
    ]
    got = [(r.oracle, r.actual) for r in compare_with_expected(now, expected)]
    assert got == [("batch-size", "vacuous"), ("run-to-run", "incomplete")]


def test_same_records_against_own_matrix_have_no_regressions(tmp_path: Path) -> None:
    assert compare_with_expected(_records(), _expected(tmp_path, _records())) == []


def test_bare_list_of_cells_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(json.loads(_expected(tmp_path, [rec()]).read_text())["cells"]))
    assert len(compare_with_expected([rec(verdict="divergent")], path)) == 1


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "not found"),
        ("{not json", "not valid JSON"),
        ('{"cells": [{"family": "matmul"}]}', "not a matrix.json"),
    ],
)
def test_bad_expected_matrix_is_a_clear_error(tmp_path: Path, content: str | None, match: str) -> None:
    path = tmp_path / "expected.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ExpectedMatrixError, match=match) as info:
        compare_with_expected([rec()], path)
    assert str(path) in str(info.value)


def test_shuffled_records_give_identical_json(tmp_path: Path) -> None:
    recs = _records()
    shuffled = recs[:]
    random.Random(7).shuffle(shuffled)
    a = render_matrix(recs, tmp_path / "a")["json"].read_text()
    b = render_matrix(shuffled, tmp_path / "b")["json"].read_text()
    assert a == b


def test_foreign_control_and_unsupported_reason_are_shown() -> None:
    from pytest_invariance.matrix import evidence_parts

    foreign = rec(family="engine", implementation="vllm", oracle="unique-samples",
                  control={"name": "inverse target bundled", "diverged": True, "foreign": True})  # fmt: skip
    assert "positive control on another engine" in evidence_parts(foreign)
    assert "positive control on another engine" not in evidence_parts(rec())
    refused = rec(verdict="unsupported", evidence={"error": "RuntimeError: No available kernel."})
    assert any("No available kernel" in p for p in evidence_parts(refused))


def _one_key(**kw) -> dict:
    r = rec(verdict="vacuous", control={"name": "mutant:splitkv-decode", "diverged": False}, **kw)
    r["extra"] = {"vacuous_by_construction": "one key: the output is v exactly"}
    return r


def test_vacuous_by_construction_is_named_not_the_headline(tmp_path: Path) -> None:
    """A declared-trivial config (attention at one key) does not make a tested cell vacuous."""
    recs = [
        _one_key(shape={"L": 1}, nodeid="t::L1"),
        rec(shape={"L": 255}, nodeid="t::L255"),
        rec(shape={"L": 256}, nodeid="t::L256"),
    ]
    (cell,) = build_cells(recs)
    assert cell["verdict"] == "invariant" and cell["records"] == 2
    assert cell["evidence"] == (
        "batch-size: invariant (weakest 5/5 clean, rate < 0.43, 1 more config vacuous by construction [one key: the output is v exactly],"
        " 2/2 configs invariant)"
    )
    out = json.loads(render_matrix(recs, tmp_path)["json"].read_text())
    assert out["cells"][0]["vacuous_by_construction"] == {
        "configs": 1,
        "reasons": ["one key: the output is v exactly"],
    }


def test_vacuous_by_construction_alone_or_undeclared_stays_vacuous() -> None:
    """Only a declared reason exempts a record, and a cell with nothing else stays vacuous."""
    (alone,) = build_cells([_one_key()])
    assert alone["verdict"] == "vacuous"
    undeclared = rec(verdict="vacuous", control={"name": "m", "diverged": False}, nodeid="t::x", shape={"L": 7})
    (cell,) = build_cells([undeclared, rec(nodeid="t::y", shape={"L": 9})])
    assert cell["verdict"] == "vacuous"
    divergent_at_one_key = _one_key(nodeid="t::z")
    divergent_at_one_key["verdict"] = "divergent"
    (cell,) = build_cells([divergent_at_one_key, rec(nodeid="t::y", shape={"L": 9})])
    assert cell["verdict"] == "divergent"


def test_positive_controls_are_named_by_design_not_by_verdict() -> None:
    from pytest_invariance.matrix.glance import is_control

    assert is_control("matmul", "mutant:splitk-matmul", None)
    assert is_control("engine", "bundled", "default") and is_control("engine", "bundled+tp2", "default")
    assert is_control("engine", "bundled+shared-rng", "invariant")  # a knob that breaks invariance
    assert not is_control("engine", "bundled+tp2", "invariant") and not is_control("engine", "bundled", "invariant")
    assert not is_control("engine", "vllm", "default")  # a real engine's default mode is a finding


def test_localization_drift_is_plotted_with_its_culprit(tmp_path: Path) -> None:
    drift = [{"layer": "<model>", "max_ulp": 9.0}, {"layer": "model.layers.0", "max_ulp": 3.0},
             {"layer": "model.layers.1", "max_ulp": 300.0}]  # fmt: skip
    loc = rec(family="engine", implementation="model:tiny", mode="default", oracle="localize", verdict="divergent",
              evidence={"drift": drift, "culprit": {"module": "model.layers.0.mlp.down_proj"}, "trials": 1, "failures": 1})  # fmt: skip
    from pytest_invariance.matrix.series import drift_series

    ((label, layers, culprit),) = drift_series([loc])
    assert layers == [("model.layers.0", 3.0), ("model.layers.1", 300.0)] and culprit == "model.layers.0.mlp.down_proj"
    plots = " ".join(blob(render_matrix([loc], tmp_path)["html"].read_text())["plots"].values())
    assert "Localization: drift after the culprit" in plots and "model.layers.0 max ULP 3 (culprit inside)" in plots
