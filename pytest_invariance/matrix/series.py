"""Plot series drawn from records: divergence vs batch size, first divergences, classes, unique samples."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from ..oracles.classes import ClassRanges, format_ranges
from ..oracles.verdict import DIVERGENT
from ..oracles.vocabulary import LOCALIZE, PERF
from ..records import Record
from .model import _num, hardware_name, impl_label


def _row_label(rec: Record, with_hardware: bool = True) -> str:
    parts = [
        str(rec.get("family")),
        impl_label(str(rec.get("implementation")), rec.get("mode")),
        str(rec.get("quantization") or "–"),
    ]
    return " · ".join([*parts, hardware_name(rec)] if with_hardware else parts)


def _test_label(rec: Record) -> str:
    """The test's parameters (``cpu-reference-L64-bf16``), which tell rows apart; its name does not."""
    node = str(rec.get("nodeid") or "").rsplit("::", 1)[-1]
    params = node.partition("[")[2].rstrip("]")
    return params or node or json.dumps(rec.get("shape"), sort_keys=True)


def _ints(values: Any) -> set[int]:
    if not isinstance(values, list):
        return set()
    return {int(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)}


def divergence_series(
    recs: list[Record], with_hardware: bool = True
) -> list[tuple[str, dict[int, tuple[int, int]]]]:
    """Per (row, hardware, oracle): at each batch size, (configs that differed, configs known to test it).

    Tested sizes come from per-point data (``evidence.points``), ``evidence.batch_sizes`` /
    ``extra.batch_sizes``, or the edges of the equivalence classes; differing sizes from
    ``evidence.differing_batch_sizes`` or the points.
    """
    acc: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for rec in recs:
        if rec["oracle"] == PERF:  # timings, not batch sizes that differed
            continue
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
        if not bad and not tested:
            continue
        label = f"{_row_label(rec, with_hardware)} · {rec.get('oracle')}"
        for n in bad | tested:
            acc[label][n][1] += 1
            if n in bad:
                acc[label][n][0] += 1
    return [(label, {n: (c[0], c[1]) for n, c in sorted(pts.items())}) for label, pts in sorted(acc.items())]


def first_divergence_counts(recs: list[Record]) -> dict[str, list[tuple[str, int]]]:
    """Per hardware: how many divergent records first differed at each batch size."""
    acc: dict[str, Counter] = defaultdict(Counter)
    for rec in recs:
        if rec.get("verdict") != DIVERGENT:
            continue
        n = (rec["evidence"].get("first") or {}).get("batch_size")
        if isinstance(n, int) and not isinstance(n, bool):
            acc[hardware_name(rec)][n] += 1
    return {hw: [(str(n), c) for n, c in sorted(cnt.items())] for hw, cnt in sorted(acc.items())}


def class_series(recs: list[Record]) -> list[tuple[str, ClassRanges]]:
    """(label, class ranges) of every record that found classes, one per distinct pair, sorted."""
    out: dict[tuple[str, str], ClassRanges] = {}
    for rec in recs:
        ranges = rec["evidence"].get("equivalence_classes")
        if ranges:
            out[(f"{_row_label(rec)} · {_test_label(rec)}", format_ranges(ranges))] = ranges
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


def unique_series(recs: list[Record]) -> list[tuple[str, list[tuple[float, float]]]]:
    """Engine records: unique completions vs concurrency (1 everywhere means invariant)."""
    out = []
    for rec in recs:
        if rec.get("family") != "engine":
            continue
        pts = _xy_pairs(rec["evidence"])
        if pts:
            label = f"{impl_label(str(rec.get('implementation')), rec.get('mode'))} · {hardware_name(rec)} · "
            out.append((label + f"{rec.get('oracle')} · {_test_label(rec)}", pts))
    return sorted(out)


def drift_series(recs: list[Record]) -> list[tuple[str, list[tuple[str, float]], str | None]]:
    """Localization records: (label, [(layer, max ULP)] in model order, culprit module or None).

    The drift after the culprit, layer by layer, is what ``evidence.drift`` holds (``localize``)."""
    out = []
    for rec in recs:
        drift = rec["evidence"].get("drift")
        if rec["oracle"] != LOCALIZE or not isinstance(drift, list):
            continue
        layers = [(str(d.get("layer")), _num(d.get("max_ulp")) or 0.0) for d in drift if isinstance(d, Mapping)]
        layers = [(name, ulp) for name, ulp in layers if not name.startswith("<")]  # the whole-model row
        culprit = rec["evidence"].get("culprit")
        module = culprit.get("module") if isinstance(culprit, Mapping) else None
        if layers:
            out.append((f"{impl_label(str(rec['implementation']), rec['mode'])} · {hardware_name(rec)} · "
                        f"{_test_label(rec)}", layers, module))  # fmt: skip
    return sorted(out, key=lambda item: item[0])
