"""Records to cells in one streaming pass: memory follows configurations, not records.

Why: a fleet appends a full run per machine per day, so records files reach millions of lines,
and holding every record (2 KB of JSON, several times that as Python objects) does not fit. Each
record is reduced on arrival to a small :class:`Entry` (its verdict, contract, severity, cost,
power and plot data; shared parts interned) that replaces the entry of its configuration only
when it is later. A cell's representative record, the one whose evidence the cell prints, is read
again by where it is, so only one record per cell is ever parsed twice.

"The latest run wins" applies per software stack: the stack is part of the configuration, and a
cell whose stacks disagree shows the newest stack's verdict, marked changed, with every stack's
verdict in its evidence.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..identity import STACK_FIELDS, hardware_class, stack_label, stack_of
from ..oracles.stats import weakest_pass
from ..oracles.verdict import INVARIANT, vacuous_by_construction, worst
from ..records import Record
from .model import CELL_KEYS, _num, evidence_parts, oracle_text
from .series import PlotItem, plot_data

try:
    import orjson as _orjson
except ImportError:  # a --no-deps install: json gives the same text for the shapes records hold
    _orjson = None


def shape_text(shape: Any) -> str:
    """The shape as sorted compact JSON: part of a configuration's key and a tie-break."""
    if _orjson is not None:
        try:
            return _orjson.dumps(shape, option=_orjson.OPT_SORT_KEYS).decode()
        except (TypeError, _orjson.JSONEncodeError):  # an integer past 64 bits
            pass
    return json.dumps(shape, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=65536)
def time_of(text: str) -> float:
    """A record's ISO time as seconds (unparseable: before everything)."""
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return -math.inf
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


@dataclass(slots=True)
class Entry:
    """The latest record of one configuration, reduced to what its cell and the plots need."""

    order: tuple  # (time, run id, position read): later wins
    cell: tuple  # (family, implementation, mode, quantization, hardware class, oracle)
    stack: tuple
    nodeid: str
    shape: str
    run_id: str
    verdict: str
    contract: str
    vbc: str | None  # vacuous by construction: the declared reason
    severity: tuple  # (-rate, -max ULP)
    cost: tuple | None  # (ratio, stock)
    power: tuple | None  # (trials, failures) of an invariant record
    zoo: dict | None  # ``extra.power``: the planted-bug zoo's kill rate this record was reached with
    plot: Any  # series.PlotData or None
    handle: Any  # the record itself, or where to read it again


def _cost_of(rec: Record) -> tuple | None:
    cost = rec["cost"]
    if cost is None:
        return None
    ratio = _num(cost.get("ratio"))
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return None
    return (ratio, str(cost["stock"]) if cost.get("stock") else None)


def cost_summary_of(costs: Iterable[tuple[str, str, tuple]]) -> dict | None:
    """Median of ``cost.ratio`` (stock time / this time) over distinct (node, shape, ratio)."""
    seen: dict[tuple, float] = {}
    stocks: set[str] = set()
    for nodeid, shape, (ratio, stock) in costs:
        seen[(nodeid, shape, ratio)] = ratio
        if stock:
            stocks.add(stock)
    if not seen:
        return None
    import statistics

    ratios = sorted(seen.values())
    med = statistics.median(ratios)
    text = f"{med:.2f}× stock"
    if len(ratios) > 1:
        text += f" (median of {len(ratios)}, {ratios[0]:.2f}–{ratios[-1]:.2f})"
    return {"ratio": round(med, 4), "min": round(ratios[0], 4), "max": round(ratios[-1], 4), "n": len(ratios),
            "stock": sorted(stocks), "text": text}  # fmt: skip


@dataclass
class Reduced:
    """What the renderers read, built once from the kept entries."""

    records_read: int
    records_kept: int
    runs: int
    cells: list[dict]
    row_costs: dict[tuple, dict]  # (family, implementation, mode or "", quantization or "", hardware) -> cost
    plots: list[PlotItem]
    hardware: dict[str, dict]  # hardware class -> {"hardware", "software", "stacks"}


class Reducer:
    """Feed records with :meth:`add` (any order, any number of files); :meth:`finish` once."""

    def __init__(self) -> None:
        self.best: dict[tuple, Entry] = {}
        self.read = 0
        self._fps: dict[str, tuple] = {}  # hardware class -> (order, hardware, software)
        self._stacks: dict[str, set] = defaultdict(set)
        self._interned: dict[Any, Any] = {}

    def _intern(self, value: Any) -> Any:
        return self._interned.setdefault(value, value)

    def add(self, rec: Record, handle: Any = None) -> None:
        i = self.read
        self.read += 1
        hw, sw = rec["hardware"], rec["software"]
        hwc, stack = self._intern(hardware_class(hw)), self._intern(stack_of(hw, sw))
        run_id = self._intern(str(rec.get("run_id") or ""))
        order = (time_of(str(rec.get("time") or "")), run_id, i)
        nodeid, shape = self._intern(rec.get("nodeid")), self._intern(shape_text(rec.get("shape")))
        cell = self._intern((rec.get("family") or "", rec.get("implementation") or "", rec.get("mode") or None,
                             rec.get("quantization") or None, hwc, rec.get("oracle") or ""))  # fmt: skip
        key = (nodeid, *cell[:4], cell[5], shape, hwc, stack)
        cur = self.best.get(key)
        if cur is not None and order < cur.order:
            return
        fp = self._fps.get(hwc)
        if fp is None or order >= fp[0]:
            self._fps[hwc] = (order, hw, sw)
        self._stacks[hwc].add(stack)
        ev, verdict = rec["evidence"], rec["verdict"]
        power = None
        if verdict == INVARIANT:
            power = self._intern((int(ev.get("trials") or rec.get("trials") or 1), int(ev.get("failures") or 0)))
        self.best[key] = Entry(
            order, cell, stack, nodeid, shape, run_id, self._intern(verdict),
            self._intern(str(rec.get("contract") or "bitwise")), vacuous_by_construction(rec),
            self._intern((-(_num(ev.get("rate")) or 0.0), -(_num(ev.get("max_ulp")) or 0.0))),
            _cost_of(rec), power, zoo_of(rec), self._intern(plot_data(rec)), rec if handle is None else handle,
        )  # fmt: skip

    def kept(self) -> list[Entry]:
        """Latest per configuration, and of one test node only its latest run's records, oldest first."""
        newest: dict[tuple, tuple] = {}  # node -> (order of its latest record, that record's run)
        nodes = []
        for key, e in self.best.items():
            node = key[:6] + key[7:]  # the configuration without its shape: one test node
            nodes.append(node)
            if node not in newest or e.order > newest[node][0]:
                newest[node] = (e.order, e.run_id)
        kept = [e for node, e in zip(nodes, self.best.values(), strict=True) if e.run_id == newest[node][1]]
        return sorted(kept, key=lambda e: e.order)

    def finish(self, load: Callable[[Any], Record] | None = None) -> Reduced:
        """Build the cells; ``load`` reads a representative record from its handle (identity
        where the records were added themselves)."""
        kept = self.kept()
        groups: dict[tuple, dict[tuple, list[Entry]]] = defaultdict(lambda: defaultdict(list))
        for e in kept:
            groups[e.cell][e.stack].append(e)
        load = load or (lambda handle: handle)
        cells, shown = [], []
        for key, by_stack in groups.items():
            subs = []
            for stack, entries in by_stack.items():
                subs.append((max(e.order for e in entries), stack, entries, build_cell(key, entries, load)))
            subs.sort(key=lambda s: s[0])
            latest, stack, entries, cell = subs[-1]
            cell["stack"] = stack_label(stack)
            if len(subs) > 1:
                mark_stacks(cell, [(s[1], s[3]) for s in subs], stack_fields_differing([s[1] for s in subs]))
            cells.append(cell)
            shown += entries
        row_cost_parts: dict[tuple, list] = defaultdict(list)
        plots = []
        for e in shown:
            fam, impl, mode, quant, hw, oracle = e.cell
            if e.cost is not None:
                row_cost_parts[(fam, impl, mode or "", quant or "", hw)].append((e.nodeid, e.shape, e.cost))
            if e.plot is not None:
                plots.append(PlotItem(fam, impl, mode, quant, hw, oracle, e.verdict, e.plot))
        row_costs = {k: c for k, parts in row_cost_parts.items() if (c := cost_summary_of(parts)) is not None}
        hardware = {
            hwc: {"hardware": dict(hw), "software": dict(sw), "stacks": sorted(stack_label(s) for s in self._stacks[hwc])}
            for hwc, (_, hw, sw) in sorted(self._fps.items())
        }
        return Reduced(self.read, len(kept), len({e.run_id for e in kept}), cells, row_costs, plots, hardware)


def stack_fields_differing(stacks: list[tuple]) -> list[int]:
    """Indices of the stack parts that are not the same in every stack (what a change is about)."""
    return [i for i in range(len(STACK_FIELDS) + 1) if len({s[i] for s in stacks}) > 1]


def zoo_of(rec: Record) -> dict | None:
    """The record's ``extra.power`` reduced to what a cell shows (None where the zoo did not speak)."""
    p = (rec.get("extra") or {}).get("power")
    if not isinstance(p, dict) or not p.get("classes"):
        return None
    return {k: p.get(k) for k in ("config", "caught", "classes", "missed")}


def cell_power(entries: list[Entry]) -> dict | None:
    """The weakest zoo power among a cell's entries (lowest kill rate), None where none has one."""
    powers = [e.zoo for e in entries if e.zoo is not None]
    return min(powers, key=lambda p: (p["caught"] / p["classes"], p.get("config") or "")) if powers else None


def weakest_of(entries: list[Entry]) -> tuple[int, int, float] | None:
    """``oracles.stats.weakest_pass`` over the entries' (trials, failures)."""
    return weakest_pass([{"verdict": INVARIANT, "evidence": {"trials": t, "failures": f}}
                         for e in entries if e.power is not None for t, f in [e.power]])  # fmt: skip


def verdict_counts(entries: list[Entry]) -> dict[str, int]:
    return dict(sorted(Counter(e.verdict for e in entries).items()))


def worst_of(entries: list[Entry]) -> str:
    return worst([e.verdict for e in entries])


def build_cell(key: tuple, all_entries: list, load: Callable[[Any], Record]) -> dict:
    """One cell of one software stack from its kept entries (``reduce.Entry``, oldest first);
    ``load`` reads the representative record, the one whose evidence the cell prints."""
    trivial = [e for e in all_entries if e.vbc]
    entries = [e for e in all_entries if not e.vbc] or all_entries
    verdict = worst_of(entries)
    # most telling first: highest failure rate, then largest ULP, then node id and shape
    rep_entry = min((e for e in entries if e.verdict == verdict), key=lambda e: (*e.severity, str(e.nodeid or ""), e.shape))
    rep = load(rep_entry.handle)
    ev, control = rep["evidence"], rep["control"]
    cell = dict(zip(CELL_KEYS, key, strict=True))
    cell.update(
        verdict=verdict,
        verdict_counts=verdict_counts(entries),
        records=len(entries),
        contracts=sorted({e.contract for e in entries}),
        evidence_parts=evidence_parts(rep),
        first=ev.get("first"),
        max_ulp=ev.get("max_ulp"),
        failures=ev.get("failures"),
        trials=ev.get("trials"),
        equivalence_classes=ev.get("equivalence_classes"),
        nodeid=rep.get("nodeid"),
        control=None if control is None else {"name": control.get("name"), "diverged": control.get("diverged")},
        cost=cost_summary_of((e.nodeid, e.shape, e.cost) for e in entries if e.cost is not None),
    )
    power = weakest_of(entries) if verdict == INVARIANT else None
    if power is not None:  # the weakest evidence behind a pass: its trials and failure-rate bound
        trials, failures, hi = power
        cell["weakest_pass"] = {"trials": trials, "failures": failures, "wilson95_upper": round(hi, 4)}
        cell["evidence_parts"].append(f"weakest {trials - failures}/{trials} clean, rate < {hi:.2f}")
    if (zoo := cell_power(entries)) is not None:  # the zoo's kill rate this verdict was reached with
        cell["power"] = zoo
        if verdict == INVARIANT:
            cell["evidence_parts"].append(f"zoo power {zoo['caught']}/{zoo['classes']}")
    if trivial and entries is not all_entries:
        reasons = sorted({e.vbc for e in trivial})
        cell["vacuous_by_construction"] = {"configs": len(trivial), "reasons": reasons}
        cell["evidence_parts"].append(
            f"{len(trivial)} more config{'s' if len(trivial) > 1 else ''} vacuous by construction"
            f" [{'; '.join(reasons)}]"
        )
    cell["evidence"] = oracle_text(cell)
    return cell


def mark_stacks(cell: dict, subs: list[tuple[tuple, dict]], differing: list[int]) -> None:
    """A cell recorded on several software stacks (oldest first): every stack's verdict in
    ``stacks``, and where they disagree ``changed`` and a line naming what changed."""
    cell["stacks"] = [{"stack": stack_label(s), "verdict": c["verdict"], "records": c["records"],
                       "evidence": c["evidence"]} for s, c in subs]  # fmt: skip
    if len({c["verdict"] for _, c in subs}) < 2:
        return
    cell["changed"] = True
    names = [*(label for label, _, _ in STACK_FIELDS), "engine"]
    where = lambda s: ", ".join(f"{names[i]} {s[i] or 'unknown'}" for i in differing)  # noqa: E731
    cell["evidence_parts"].append("changed across stacks: " + " → ".join(f"{c['verdict']} on {where(s)}" for s, c in subs))
    cell["evidence"] = oracle_text(cell)
