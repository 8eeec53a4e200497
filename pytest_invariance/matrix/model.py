"""The matrix model: records in, cells out, built once and handed to every renderer.

Rows are (family, implementation [mode], quantization), columns are hardware
names, and a cell holds one verdict per oracle with its evidence. When a cell
gathers several records of one oracle (several shapes, say) the worst verdict
speaks for it, because one divergent shape is enough to make a configuration
unsafe to ship. When the same test configuration was recorded several times,
the latest record wins, so appending a new run to an old records file updates
the matrix instead of mixing stale verdicts in.

pandas does the one job it is good at here, the row x hardware grouping of
cells into the table (``_grid``), and writes the CSV; everything else is plain
Python over the records. Importing this module does not import torch.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..oracles.stats import weakest_pass
from ..oracles.verdict import (
    DIVERGENT,
    INCOMPLETE,
    INVARIANT,
    UNSUPPORTED,
    VACUOUS,
    vacuous_by_construction,
    worst,
)
from ..oracles.vocabulary import FAMILIES, ORACLES
from ..records import SCHEMA, Record, record_key

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


def _time_of(rec: Record) -> float:
    text = str(rec.get("time") or "")
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return -math.inf
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


def latest_records(records: Iterable[Record]) -> list[Record]:
    """One record per configuration (``records.record_key``): the one with the latest ``time``;
    and of one test node (same node id, implementation, mode, quantization, oracle, hardware), only
    the records of its latest run.

    Ties on time go to the later run id, then to the record read last. The second rule is why a
    suite whose defaults changed (another prompt length, another model preset) does not leave its
    older shapes' verdicts standing beside the new ones: the latest run of a test says what that
    test finds now, with every shape it ran.
    """
    best: dict[tuple, tuple[tuple, Record]] = {}
    for i, rec in enumerate(records):
        order = (_time_of(rec), str(rec.get("run_id") or ""), i)
        key = record_key(rec)
        if key not in best or order >= best[key][0]:
            best[key] = (order, rec)
    newest: dict[tuple, tuple[tuple, str]] = {}  # node -> (order of its latest record, that record's run)
    for order, rec in best.values():
        node = _node_key(rec)
        if node not in newest or order > newest[node][0]:
            newest[node] = (order, str(rec.get("run_id") or ""))
    kept = [(o, r) for o, r in best.values() if str(r.get("run_id") or "") == newest[_node_key(r)][1]]
    return [rec for _, rec in sorted(kept, key=lambda item: item[0])]


def _node_key(rec: Record) -> tuple:
    """``record_key`` without the shape: one test node's verdicts on one implementation and hardware."""
    key = record_key(rec)
    return key[:6] + key[7:]


def hardware_name(rec: Record) -> str:
    return str(rec["hardware"]["name"])  # parse_record guarantees a non-empty name


def impl_label(implementation: str, mode: str | None) -> str:
    """``bundled [invariant]``: an engine's mode is part of what was tested."""
    return f"{implementation} [{mode}]" if mode else implementation


def cell_key(rec: Record) -> tuple:
    return (
        rec.get("family") or "",
        rec.get("implementation") or "",
        rec.get("mode") or None,
        rec.get("quantization") or None,
        hardware_name(rec),
        rec.get("oracle") or "",
    )


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


def _severity_key(rec: Record) -> tuple:
    """Most telling record first: highest failure rate, then largest ULP, then node id."""
    ev = rec["evidence"]
    rate = _num(ev.get("rate")) or 0.0
    ulp = _num(ev.get("max_ulp")) or 0.0
    return (-rate, -ulp, str(rec.get("nodeid") or ""), json.dumps(rec.get("shape"), sort_keys=True))


def cost_summary(recs: Iterable[Record]) -> dict | None:
    """Median of ``cost.ratio`` (stock time / this time) over distinct measurements."""
    seen: dict[tuple, float] = {}
    stocks: set[str] = set()
    for rec in recs:
        cost = rec["cost"]
        if cost is None:
            continue
        ratio = _num(cost.get("ratio"))
        if ratio is None or not math.isfinite(ratio) or ratio <= 0:
            continue
        seen[(str(rec.get("nodeid")), json.dumps(rec.get("shape"), sort_keys=True), ratio)] = ratio
        if cost.get("stock"):
            stocks.add(str(cost["stock"]))
    if not seen:
        return None
    ratios = sorted(seen.values())
    med = statistics.median(ratios)
    text = f"{med:.2f}× stock"
    if len(ratios) > 1:
        text += f" (median of {len(ratios)}, {ratios[0]:.2f}–{ratios[-1]:.2f})"
    return {
        "ratio": round(med, 4),
        "min": round(ratios[0], 4),
        "max": round(ratios[-1], 4),
        "n": len(ratios),
        "stock": sorted(stocks),
        "text": text,
    }


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


def build_cells(records: Iterable[Record]) -> list[dict]:
    """Matrix cells, one per (family, implementation, mode, quantization, hardware, oracle), sorted."""
    groups: dict[tuple, list[Record]] = defaultdict(list)
    for rec in latest_records(records):
        groups[cell_key(rec)].append(rec)
    cells = []
    for key, all_recs in groups.items():
        trivial = [r for r in all_recs if vacuous_by_construction(r)]
        recs = [r for r in all_recs if not vacuous_by_construction(r)] or all_recs
        verdict = worst([r["verdict"] for r in recs])
        rep = sorted((r for r in recs if r["verdict"] == verdict), key=_severity_key)[0]
        ev, control = rep["evidence"], rep["control"]
        cell = dict(zip(CELL_KEYS, key, strict=True))
        cell.update(
            verdict=verdict,
            verdict_counts=dict(sorted(Counter(r["verdict"] for r in recs).items())),
            records=len(recs),
            contracts=sorted({str(r.get("contract") or "bitwise") for r in recs}),
            evidence_parts=evidence_parts(rep),
            first=ev.get("first"),
            max_ulp=ev.get("max_ulp"),
            failures=ev.get("failures"),
            trials=ev.get("trials"),
            equivalence_classes=ev.get("equivalence_classes"),
            nodeid=rep.get("nodeid"),
            control=None
            if control is None
            else {"name": control.get("name"), "diverged": control.get("diverged")},
            cost=cost_summary(recs),
        )
        power = weakest_pass(recs) if verdict == INVARIANT else None
        if power is not None:  # the weakest evidence behind a pass: its trials and failure-rate bound
            trials, failures, hi = power
            cell["weakest_pass"] = {"trials": trials, "failures": failures, "wilson95_upper": round(hi, 4)}
            cell["evidence_parts"].append(f"weakest {trials - failures}/{trials} clean, rate < {hi:.2f}")
        if (power := cell_power(recs)) is not None:  # the zoo's kill rate this verdict was reached with
            cell["power"] = power
            if verdict == INVARIANT:
                cell["evidence_parts"].append(f"zoo power {power['caught']}/{power['classes']}")
        if trivial and recs is not all_recs:
            reasons = sorted({vacuous_by_construction(r) for r in trivial})
            cell["vacuous_by_construction"] = {"configs": len(trivial), "reasons": reasons}
            cell["evidence_parts"].append(
                f"{len(trivial)} more config{'s' if len(trivial) > 1 else ''} vacuous by construction"
                f" [{'; '.join(reasons)}]"
            )
        cell["evidence"] = oracle_text(cell)
        cells.append(cell)
    cells.sort(key=_cell_sort_key)
    return cells


def cell_power(recs: list[Record]) -> dict | None:
    """The weakest ``extra.power`` among a cell's records (lowest kill rate), None where none has one."""
    powers = [p for r in recs if isinstance(p := (r.get("extra") or {}).get("power"), dict) and p.get("classes")]
    if not powers:
        return None
    p = min(powers, key=lambda p: (p["caught"] / p["classes"], p.get("config") or ""))
    return {k: p.get(k) for k in ("config", "caught", "classes", "missed")}


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


def _grid(cells: list[dict], recs: list[Record]) -> tuple[list[tuple], list[str], dict[tuple, dict]]:
    """(rows, hardware, grid): grid[(row, hw)] = {"verdict", "lines", "cost"} for the tables."""
    df = _frame(cells)
    if df.empty:
        return [], [], {}
    cost_groups: dict[tuple, list[dict]] = defaultdict(list)
    for rec in recs:
        fam, impl, mode, quant, hw, _ = cell_key(rec)
        cost_groups[(fam, impl, mode or "", quant or "", hw)].append(rec)
    grid: dict[tuple, dict] = {}
    # cells arrive sorted, and groupby(sort=False) keeps that order for rows and oracle lines.
    for (fam, impl, mode, quant, hw), part in df.groupby([*ROW_KEYS, "hardware"], sort=False):
        verdict = worst(list(part["verdict"]))
        cost = cost_summary(cost_groups[(fam, impl, mode, quant, hw)])
        grid[((fam, impl, mode, quant), hw)] = {
            "verdict": verdict,
            "lines": list(zip(part["verdict"], part["evidence"], strict=True)),
            "cost": None if cost is None else f"{verdict}, {cost['text']}",
        }
    rows = list(dict.fromkeys(row for row, _ in grid))
    return rows, sorted(df["hardware"].unique()), grid


def _contracts(cells: list[dict]) -> list[str]:
    return sorted({c for cell in cells for c in cell["contracts"]}) or ["bitwise"]


def hardware_fingerprints(recs: list[Record]) -> dict[str, dict]:
    """The latest record's hardware and software per hardware name, for the reader's reference."""
    out: dict[str, dict] = {}
    for rec in recs:  # latest_records() returns them oldest first
        out[hardware_name(rec)] = {"hardware": dict(rec["hardware"]), "software": dict(rec["software"])}
    return dict(sorted(out.items()))


def _summary_line(recs_in: int, recs: list[Record], cells: list[dict]) -> str:
    runs = sorted({str(r.get("run_id")) for r in recs})
    return (
        f"{len(recs)} record(s) (latest per configuration, of {recs_in} read) from {len(runs)} run(s); "
        f"{len(cells)} cell(s); record schema {SCHEMA}"
    )


_HW_FIELDS = (
    ("kind", "hardware", "kind"),
    ("devices", "hardware", "device_count"),
    ("compute capability", "hardware", "compute_capability"),
    ("SMs", "hardware", "sm_count"),
    ("driver", "hardware", "driver"),
    ("CUDA", "hardware", "cuda"),
    ("CPU", "hardware", "cpu_model"),
    ("cores", "hardware", "cores"),
    ("python", "software", "python"),
    ("torch", "software", "torch"),
    ("triton", "software", "triton"),
    ("pytest-invariance", "software", "pytest_invariance"),
)


def _hw_value(fp: dict, section: str, field: str) -> str:
    v = fp.get(section, {}).get(field)
    return "–" if v in (None, "") else str(v)



@dataclass(frozen=True)
class Matrix:
    """What every renderer reads: the records read, the latest per configuration, and the cells."""

    records_read: int
    recs: list[Record]
    cells: list[dict]

    @classmethod
    def build(cls, records: Iterable[Record]) -> Matrix:
        records = list(records)
        recs = latest_records(records)
        return cls(len(records), recs, build_cells(recs))
