"""Plot series drawn from records: divergence vs batch size, first divergences, classes, unique samples.

A record's share of the plots is reduced once to a small :class:`PlotItem` (what it tested, where it
differed, its classes), so the streaming matrix keeps that and not the record; the series functions
take items or records alike.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ..identity import hardware_class
from ..oracles.classes import ClassRanges, format_ranges
from ..oracles.verdict import DIVERGENT
from ..oracles.vocabulary import LOCALIZE, PERF
from ..records import Record
from .model import _num, impl_label


class PlotData(NamedTuple):
    """What one record adds to the plots, without its cell (shared by replicas of a record)."""

    test: str  # the test's parameters (``cpu-reference-L64-bf16``)
    bad: frozenset  # batch sizes that differed
    tested: frozenset  # batch sizes known to be tested
    first_n: int | None  # a divergent record's first differing batch size
    classes: tuple | None  # equivalence classes as ((lo, hi), ...) per class
    drift: tuple | None  # (layers ((name, max ULP), ...), culprit module)
    unique: tuple | None  # ((concurrency, unique), ...) of an engine record


class PlotItem(NamedTuple):
    family: str
    implementation: str
    mode: str | None
    quantization: str | None
    hardware: str
    oracle: str
    verdict: str
    data: PlotData


def _test_label(rec: Record) -> str:
    """The test's parameters (``cpu-reference-L64-bf16``), which tell rows apart; its name does not."""
    node = str(rec.get("nodeid") or "").rsplit("::", 1)[-1]
    params = node.partition("[")[2].rstrip("]")
    return params or node or json.dumps(rec.get("shape"), sort_keys=True)


def _ints(values: Any) -> set[int]:
    if not isinstance(values, list):
        return set()
    if all(type(v) is int for v in values):  # what records hold: one pass in C, no conversions
        return set(values)
    return {int(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _batch_sizes(rec: Record) -> tuple[frozenset, frozenset]:
    """(differing, tested) batch sizes from ``evidence.points``, ``differing_batch_sizes``,
    ``batch_sizes`` / ``extra.batch_sizes`` and the edges of the equivalence classes."""
    if rec["oracle"] == PERF:  # timings, not batch sizes that differed
        return frozenset(), frozenset()
    ev, extra = rec["evidence"], rec["extra"]
    bad = _ints(ev.get("differing_batch_sizes"))
    tested = _ints(ev.get("batch_sizes")) | _ints(extra.get("batch_sizes"))
    points = ev.get("points") if isinstance(ev.get("points"), list) else []
    for p in points:
        if isinstance(p, Mapping) and isinstance(p.get("batch_size"), int):
            tested.add(p["batch_size"])
            if p.get("equal") is False or (_num(p.get("n_diff")) or 0) > 0:
                bad.add(p["batch_size"])
    for spans in ev.get("equivalence_classes") or []:
        for lo, hi in spans:
            tested.update((lo, hi))
    return frozenset(bad), frozenset(tested)


def _drift(rec: Record) -> tuple | None:
    drift = rec["evidence"].get("drift")
    if rec["oracle"] != LOCALIZE or not isinstance(drift, list):
        return None
    layers = [(str(d.get("layer")), _num(d.get("max_ulp")) or 0.0) for d in drift if isinstance(d, Mapping)]
    layers = [(name, ulp) for name, ulp in layers if not name.startswith("<")]  # the whole-model row
    culprit = rec["evidence"].get("culprit")
    module = culprit.get("module") if isinstance(culprit, Mapping) else None
    return (tuple(layers), module) if layers else None


def plot_data(rec: Record) -> PlotData | None:
    """The record's share of the plots (None: it adds nothing to any plot)."""
    ev = rec["evidence"]
    bad, tested = _batch_sizes(rec)
    first = (ev.get("first") or {}).get("batch_size") if rec.get("verdict") == DIVERGENT else None
    first_n = first if isinstance(first, int) and not isinstance(first, bool) else None
    ranges = ev.get("equivalence_classes")
    classes = tuple(tuple(tuple(span) for span in spans) for spans in ranges) if ranges else None
    unique = tuple(_xy_pairs(ev)) if rec.get("family") == "engine" else ()
    data = PlotData(_test_label(rec), bad, tested, first_n, classes, _drift(rec), unique or None)
    return data if (bad or tested or first_n is not None or classes or data.drift or data.unique) else None


def plot_items(recs: Iterable[Record]) -> list[PlotItem]:
    """Records as plot items (those that add nothing to a plot are left out)."""
    out = []
    for rec in recs:
        data = plot_data(rec)
        if data is not None:
            out.append(PlotItem(rec["family"], rec["implementation"], rec.get("mode"), rec.get("quantization"),
                                hardware_class(rec["hardware"]), rec["oracle"], rec["verdict"], data))  # fmt: skip
    return out


def _items(items_or_recs: Iterable[Any]) -> list[PlotItem]:
    items = list(items_or_recs)
    return items if not items or isinstance(items[0], PlotItem) else plot_items(items)


def _row_label(item: PlotItem, with_hardware: bool = True) -> str:
    parts = [str(item.family), impl_label(str(item.implementation), item.mode), str(item.quantization or "–")]
    return " · ".join([*parts, item.hardware] if with_hardware else parts)


def divergence_series(
    items: Iterable[Any], with_hardware: bool = True
) -> list[tuple[str, dict[int, tuple[int, int]]]]:
    """Per (row, hardware, oracle): at each batch size, (configs that differed, configs known to test it)."""
    acc: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for item in _items(items):
        bad, tested = item.data.bad, item.data.tested
        if not bad and not tested:
            continue
        label = f"{_row_label(item, with_hardware)} · {item.oracle}"
        for n in bad | tested:
            acc[label][n][1] += 1
            if n in bad:
                acc[label][n][0] += 1
    return [(label, {n: (c[0], c[1]) for n, c in sorted(pts.items())}) for label, pts in sorted(acc.items())]


def first_divergence_counts(items: Iterable[Any]) -> dict[str, list[tuple[str, int]]]:
    """Per hardware: how many divergent records first differed at each batch size."""
    acc: dict[str, Counter] = defaultdict(Counter)
    for item in _items(items):
        if item.data.first_n is not None:
            acc[item.hardware][item.data.first_n] += 1
    return {hw: [(str(n), c) for n, c in sorted(cnt.items())] for hw, cnt in sorted(acc.items())}


def class_series(items: Iterable[Any]) -> list[tuple[str, ClassRanges]]:
    """(label, class ranges) of every record that found classes, one per distinct pair, sorted."""
    out: dict[tuple[str, str], ClassRanges] = {}
    for item in _items(items):
        if item.data.classes:
            ranges = [[list(span) for span in spans] for spans in item.data.classes]
            out[(f"{_row_label(item)} · {item.data.test}", format_ranges(ranges))] = ranges
    return [(label, out[(label, text)]) for label, text in sorted(out)]


def _xy_pairs(ev: Mapping[str, Any]) -> list[tuple[float, float]]:
    uniq, conc = ev.get("unique"), ev.get("concurrency")
    pairs: list[tuple[Any, Any]] = []
    if isinstance(uniq, Mapping):
        pairs = list(uniq.items())
    elif isinstance(uniq, list) and isinstance(conc, list) and len(uniq) == len(conc):
        pairs = list(zip(conc, uniq, strict=True))
    elif uniq is not None and conc is not None and not isinstance(uniq, list) and not isinstance(conc, list):
        pairs = [(conc, uniq)]
    elif isinstance(ev.get("points"), list):
        pairs = [
            (p.get("concurrency"), p.get("unique"))
            for p in ev["points"]
            if isinstance(p, Mapping) and "concurrency" in p and "unique" in p
        ]
    out = []
    for x, y in pairs:
        xf, yf = _num(x), _num(y)
        if xf is not None and yf is not None and math.isfinite(xf) and math.isfinite(yf) and xf > 0:
            out.append((xf, yf))
    return sorted(out)


def unique_series(
    items: Iterable[Any], with_hardware: bool = True
) -> list[tuple[str, list[tuple[float, float]]]]:
    """Engine records: unique completions vs concurrency (1 everywhere means invariant)."""
    out = []
    for item in _items(items):
        if item.data.unique:
            hw = f"{item.hardware} · " if with_hardware else ""
            label = f"{impl_label(str(item.implementation), item.mode)} · {hw}"
            out.append((label + f"{item.oracle} · {item.data.test}", list(item.data.unique)))
    return sorted(out)


def drift_series(items: Iterable[Any]) -> list[tuple[str, list[tuple[str, float]], str | None]]:
    """Localization records: (label, [(layer, max ULP)] in model order, culprit module or None).

    The drift after the culprit, layer by layer, is what ``evidence.drift`` holds (``localize``)."""
    out = []
    for item in _items(items):
        if item.data.drift:
            layers, module = item.data.drift
            out.append((f"{impl_label(str(item.implementation), item.mode)} · {item.hardware} · "
                        f"{item.data.test}", list(layers), module))  # fmt: skip
    return sorted(out, key=lambda item: item[0])
