"""The matrix shows the power a verdict was reached with: a field in matrix.json, the kill rate in
matrix-full.md's evidence, one footnote mark in the glance table where the zoo saw a blind spot."""

from __future__ import annotations

import json

from synthetic_records import rec

from pytest_invariance.matrix import render_matrix


def _with_power(r: dict, caught: int, classes: int, missed: list[str]) -> dict:
    r["extra"]["power"] = {"config": "abc123", "oracle": r["oracle"], "caught": caught, "classes": classes,
                           "missed": missed, "text": f"{caught}/{classes} zoo classes"}
    return r


def test_power_in_json_full_md_and_one_glance_mark(tmp_path) -> None:
    recs = [
        _with_power(rec(oracle="batch-size"), 9, 10, ["only-at-6 (size not swept: needs N=6)"]),
        _with_power(rec(oracle="batch-position"), 10, 10, []),
        rec(oracle="run-to-run"),  # measured without the zoo: no power, no mark
    ]
    paths = render_matrix(recs, tmp_path)
    cells = {c["oracle"]: c for c in json.loads(paths["json"].read_text())["cells"]}
    assert cells["batch-size"]["power"] == {"config": "abc123", "caught": 9, "classes": 10,
                                            "missed": ["only-at-6 (size not swept: needs N=6)"]}
    assert "power" not in cells["run-to-run"]
    full = paths["full-md"].read_text()
    assert "batch-size: invariant (weakest 5/5 clean, rate < 0.43, zoo power 9/10)" in full
    assert "batch-position: invariant (weakest 5/5 clean, rate < 0.43, zoo power 10/10)" in full
    glance = paths["md"].read_text()
    assert "✔ size[1] ✔ pos ✔ rerun" in glance
    assert "1. a pass reached with zoo power 9/10 (blind to only-at-6 (size not swept: needs N=6))" in glance


def test_the_weakest_power_of_a_cell_speaks_for_it(tmp_path) -> None:
    recs = [_with_power(rec(shape={"K": 64}), 10, 10, []), _with_power(rec(shape={"K": 128}), 7, 10, ["a", "b", "c"])]
    cell = json.loads(render_matrix(recs, tmp_path)["json"].read_text())["cells"][0]
    assert (cell["power"]["caught"], cell["power"]["missed"]) == (7, ["a", "b", "c"])
