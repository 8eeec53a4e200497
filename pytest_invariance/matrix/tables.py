"""matrix.json and matrix.csv: the cells as data."""

from __future__ import annotations

import json

from ..oracles.classes import format_ranges
from ..records import SCHEMA
from .build import Matrix
from .model import (
    CELL_KEYS,
    MATRIX_SCHEMA,
    _contracts,
    _summary_line,
)


def _json_cells(cells: list[dict]) -> list[dict]:
    keep = (*CELL_KEYS, "verdict", "evidence", "contracts", "cost", "records", "verdict_counts",
            "first", "max_ulp", "failures", "trials", "equivalence_classes", "nodeid", "control")  # fmt: skip
    optional = ("vacuous_by_construction", "weakest_pass", "stack", "stacks", "changed", "power")
    out = [{**{k: c[k] for k in keep}, **{k: c[k] for k in optional if k in c}} for c in cells]
    for c in out:  # classes are data until here; the file shows the {1} {2..32} text a reader scans
        if c["equivalence_classes"] is not None:
            c["equivalence_classes"] = format_ranges(c["equivalence_classes"])
    return out


def render_json(m: Matrix) -> str:
    cells = m.cells
    doc = {
        "schema": MATRIX_SCHEMA,
        "record_schema": SCHEMA,
        "contracts": _contracts(cells),
        "summary": _summary_line(m),
        "hardware": m.hardware,
        "cells": _json_cells(cells),
    }
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"


def render_csv(m: Matrix) -> str:
    cells = m.cells
    import pandas as pd

    cols = [*CELL_KEYS, "verdict", "contract", "evidence", "cost_ratio", "cost", "records"]
    df = pd.DataFrame(
        [
            {
                **{k: c[k] for k in CELL_KEYS},
                "verdict": c["verdict"],
                "contract": ";".join(c["contracts"]),
                "evidence": c["evidence"],
                "cost_ratio": None if c["cost"] is None else c["cost"]["ratio"],
                "cost": None if c["cost"] is None else c["cost"]["text"],
                "records": c["records"],
            }
            for c in cells
        ],
        columns=cols,
    )
    return df.to_csv(index=False, lineterminator="\n")
