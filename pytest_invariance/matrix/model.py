"""The matrix model: records in, cells out, built once and handed to every renderer.

Rows are (family, implementation [mode], quantization), columns are hardware
classes (``identity.hardware_class``: CPU model plus ISA, GPU plus compute
capability), and a cell holds one verdict per oracle with its evidence. When a
cell gathers several records of one oracle (several shapes, say) the worst
verdict speaks for it, because one divergent shape is enough to make a
configuration unsafe to ship. When the same test configuration was recorded
several times on one software stack, the latest record wins, so appending a new
run to an old records file updates the matrix instead of mixing stale verdicts
in; another stack's verdicts stand beside it (``reduce``).

pandas does the one job it is good at here, the row x hardware grouping of
cells into the table (``_grid``), and writes the CSV; the records are reduced
in one streaming pass (``reduce``). Importing this module does not import torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..identity import hardware_class
from ..oracles.verdict import (
    DIVERGENT,
    INCOMPLETE,
    INVARIANT,
    UNSUPPORTED,
    VACUOUS,
    worst,
)
from ..oracles.vocabulary import FAMILIES, ORACLES
from ..records import SCHEMA, Record

MATRIX_SCHEMA = "pytest-invariance.matrix/1"

FAMILY_ORDER = FAMILIES  # rows and oracle lines in the vocabulary's order
ORACLE_ORDER = ORACLES
VERDICT_COLOURS = {
    INVARIANT: "#c8e6c9",
    DIVERGENT: "#ffcdd2",
    VACUOUS: "#fff3bf",
    INCOMPLETE: "#ffe0b2",
    UNSUPPORTED: "#e0e0e0",
}
VERDICT_MEANING = {
    INVARIANT: "no divergence, and the positive control diverged (a clean pass)",
    DIVERGENT: "the output depended on what shared the batch",
    VACUOUS: "no divergence, but the positive control did not diverge either, so the test could not see one",
    INCOMPLETE: "errors or timeouts cut the check short",
    UNSUPPORTED: "not available on this hardware",
}
ROW_KEYS = ("family", "implementation", "mode", "quantization")
CELL_KEYS = (*ROW_KEYS, "hardware", "oracle")


# --------------------------------------------------------------------------- records -> cells
def _rank(order: tuple[str, ...], value: str) -> tuple[int, str]:
    return (order.index(value) if value in order else len(order), value)


def hardware_name(rec: Record) -> str:
    """The record's matrix column: its hardware class."""
    return hardware_class(rec["hardware"])


def impl_label(implementation: str, mode: str | None) -> str:
    """``bundled [invariant]``: an engine's mode is part of what was tested."""
    return f"{implementation} [{mode}]" if mode else implementation


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _fmt_ulp(value: Any) -> str:
    v = _num(value)
    if v is None:
        return str(value)
    if math.isinf(v):
        return "inf"
    return str(int(v)) if v.is_integer() else f"{v:.3g}"


def _short_text(text: Any, limit: int = 90) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def evidence_parts(rec: Record) -> list[str]:
    """The few facts a reader needs to judge one record's verdict."""
    ev, extra, control = rec["evidence"], rec["extra"], rec["control"]
    verdict = rec["verdict"]
    parts: list[str] = []
    if verdict == DIVERGENT:
        first = ev.get("first") or {}
        if first.get("batch_size") is not None:
            parts.append(f"first N={first['batch_size']}")
        if first.get("position") is not None and rec.get("oracle") != "batch-size":
            parts.append(f"position {first['position']}")
        if first.get("label"):
            parts.append(str(first["label"]))
        for key in ("token_index", "token"):
            if first.get(key) is not None:
                parts.append(f"token {first[key]}")
                break
        if first.get("margin_class"):
            parts.append(str(first["margin_class"]))
        ulp = _num(ev.get("max_ulp"))
        if ulp:
            parts.append(f"max ULP {_fmt_ulp(ev.get('max_ulp'))}")
            # ULPs count representable values, so a tiny sign flip near zero reads as
            # tens of thousands of ULPs: the absolute size keeps that in proportion
            # (both are maxima over the record, not necessarily of one element).
            if _num(ev.get("max_abs")) is not None:  # 0 too: a +0/-0 flip is 0 apart
                parts.append(f"max abs {_num(ev['max_abs']):.2g}")
        if ev.get("unique") is not None and not isinstance(ev.get("unique"), (list, dict)):
            parts.append(f"{ev['unique']} unique")
    elif verdict == VACUOUS:
        if control is None:
            parts.append("no positive control")
        else:
            parts.append(f"control {control.get('name', '?')} did not diverge")
    elif verdict == INCOMPLETE:
        err = ev.get("error") or extra.get("error")
        if err:
            parts.append(f"error: {_short_text(err)}")
    elif verdict == UNSUPPORTED:
        reason = ev.get("reason") or extra.get("reason") or ev.get("error")
        if reason:
            parts.append(_short_text(reason))
    if verdict in (DIVERGENT, INCOMPLETE) and ev.get("trials"):
        parts.append(f"{ev.get('failures', '?')}/{ev['trials']} trials")
    if verdict == INVARIANT and control is not None and control.get("foreign"):
        parts.append("positive control on another engine")
    return parts


def oracle_text(cell: Mapping[str, Any]) -> str:
    """``batch-size: divergent (first N=16, max ULP 3, 4/5 trials)``, contract shown unless bitwise."""
    parts = list(cell["evidence_parts"])
    n = cell["records"]
    if n > 1:
        parts.append(f"{cell['verdict_counts'].get(cell['verdict'], 0)}/{n} configs {cell['verdict']}")
    text = f"{cell['oracle']}: {cell['verdict']}"
    if parts:
        text += f" ({', '.join(parts)})"
    if cell["contracts"] != ["bitwise"]:
        text += f" [{', '.join(cell['contracts'])}]"
    return text


def _cell_sort_key(cell: Mapping[str, Any]) -> tuple:
    return (
        _rank(FAMILY_ORDER, cell["family"]),
        cell["implementation"],
        cell["mode"] or "",
        cell["quantization"] or "",
        cell["hardware"],
        _rank(ORACLE_ORDER, cell["oracle"]),
    )


# --------------------------------------------------------------------------- the table (pandas)
def _frame(cells: list[dict]):
    import pandas as pd

    df = pd.DataFrame(cells, columns=[*CELL_KEYS, "verdict", "evidence", "contracts", "cost", "records"])
    # None keys would be dropped by groupby; the display uses "" for "not set".
    df["mode"] = df["mode"].fillna("")
    df["quantization"] = df["quantization"].fillna("")
    return df


def _grid(m: Any) -> tuple[list[tuple], list[str], dict[tuple, dict]]:
    """(rows, hardware, grid): grid[(row, hw)] = {"verdict", "lines", "cost"} for the tables."""
    df = _frame(m.cells)
    if df.empty:
        return [], [], {}
    grid: dict[tuple, dict] = {}
    # cells arrive sorted, and groupby(sort=False) keeps that order for rows and oracle lines.
    for (fam, impl, mode, quant, hw), part in df.groupby([*ROW_KEYS, "hardware"], sort=False):
        verdict = worst(list(part["verdict"]))
        cost = m.row_costs.get((fam, impl, mode, quant, hw))
        grid[((fam, impl, mode, quant), hw)] = {
            "verdict": verdict,
            "lines": list(zip(part["verdict"], part["evidence"], strict=True)),
            "cost": None if cost is None else f"{verdict}, {cost['text']}",
        }
    rows = list(dict.fromkeys(row for row, _ in grid))
    return rows, sorted(df["hardware"].unique()), grid


def _contracts(cells: list[dict]) -> list[str]:
    return sorted({c for cell in cells for c in cell["contracts"]}) or ["bitwise"]


def _summary_line(m: Any) -> str:
    return (
        f"{m.records_kept} record(s) (latest per configuration, of {m.records_read} read) from {m.runs} run(s); "
        f"{len(m.cells)} cell(s); record schema {SCHEMA}"
    )


_HW_FIELDS = (
    ("kind", "hardware", "kind"),
    ("devices", "hardware", "device_count"),
    ("compute capability", "hardware", "compute_capability"),
    ("SMs", "hardware", "sm_count"),
    ("memory GiB", "hardware", "memory_gib"),
    ("GPU", "hardware", "gpu_index"),
    ("GPU UUID", "hardware", "gpu_uuid"),
    ("driver", "hardware", "driver"),
    ("CUDA", "hardware", "cuda"),
    ("CPU", "hardware", "cpu_model"),
    ("ISA", "hardware", "isa"),
    ("AMX", "hardware", "amx"),
    ("cores", "hardware", "cores"),
    ("python", "software", "python"),
    ("torch", "software", "torch"),
    ("triton", "software", "triton"),
    ("cuBLAS", "software", "cublas"),
    ("cuDNN", "software", "cudnn"),
    ("NCCL", "software", "nccl"),
    ("pytest-invariance", "software", "pytest_invariance"),
    ("stacks", "stacks", ""),
)


def _hw_value(fp: dict, section: str, field: str) -> str:
    """A hardware-table value; ``unknown`` where an older record lacks the field, ``–`` where it
    does not apply (no GPU on a CPU record)."""
    if section == "stacks":
        stacks = fp.get("stacks") or []
        return f"{len(stacks)}: " + "; ".join(stacks) if len(stacks) > 1 else (stacks[0] if stacks else "–")
    values = fp.get(section, {})
    gpu_only = field in ("cublas", "cudnn", "nccl") and fp.get("hardware", {}).get("kind") != "cuda"
    if field not in values or gpu_only:
        return "–"
    v = values[field]
    if v is None:
        return "unknown"
    return "–" if v == "" else str(v)
