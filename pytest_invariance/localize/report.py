"""A localization as text (culprit and drift tables) and as evidence for a record."""

from __future__ import annotations

from typing import Any

from .run import Config, Localization


def _ulp(v: float | None) -> str:
    if v is None:
        return "digest only"
    return "inf" if v == float("inf") else f"{v:g}"


def _shapes(shapes: list) -> str:
    return " ".join("x".join(str(d) for d in s) or "scalar" for s in shapes)


def culprit_table(loc: Localization) -> str:
    """Markdown table: one row per distinct culprit, earliest in execution order first."""
    rows = loc.culprits
    if not rows:
        sizes = sorted({c.batch_size for c in loc.configs})
        return f"no culprit: the probe row was bitwise equal at every op for batch sizes {sizes}"
    lines = ["| module | op | in shapes | out shapes | dtype | max ULP | batch sizes | note |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        note = []
        if r["kind"] == "module":
            note.append("module call compared whole (its op sequence changes with the batch)")
        if r["via"]:
            note.append(f"via batch-wide tensor from {r['via']}")
        if r["unverified_inputs"]:
            note.append(f"{r['unverified_inputs']} input(s) without a locatable probe row")
        lines.append(f"| {r['module']} | {r['op']} | {_shapes(r['in_shapes'])} | {_shapes(r['out_shapes'])} | {r['dtype']} "
                     f"| {_ulp(r['max_ulp'])} | {r['batch_sizes']} | {'; '.join(note)} |")  # fmt: skip
    return "\n".join(lines)


def drift_table(config: Config) -> str:
    """Markdown table of one configuration: per layer, events compared, differing, max ULP."""
    lines = [f"drift at batch {config.batch_size}, position {config.position}:",
             "| layer | compared | differing | max ULP |", "|---|---|---|---|"]  # fmt: skip
    for d in config.verdict.drift:
        lines.append(f"| {d['layer']} | {d['compared']} | {d['differing']} | {_ulp(d['max_ulp'])} |")
    return "\n".join(lines)


def first_culprit_config(loc: Localization) -> Config | None:
    top = loc.culprit
    if top is None:
        return None
    return next(c for c in loc.configs if c.verdict.culprit is not None and c.verdict.culprit.index == top["index"])


def summary(loc: Localization) -> str:
    """One paragraph: the culprit line, the culprit table and the drift after the culprit."""
    top = loc.culprit
    if loc.nondeterministic:
        head = "localize: the probe alone gave other bits when repeated (nondeterministic); batch culprits are not meaningful"
    elif top is None:
        head = f"localize: no culprit over {len(loc.configs)} configuration(s), {loc.ops} ops each"
    else:
        head = (f"localize: first divergent op {top['op']} at {top['module']} (batch sizes {top['batch_sizes']}, "
                f"max ULP {_ulp(top['max_ulp'])})")  # fmt: skip
    parts = [head, culprit_table(loc)]
    cfg = first_culprit_config(loc)
    if cfg is not None:
        parts.append(drift_table(cfg))
    return "\n".join(parts)


def evidence(loc: Localization) -> dict[str, Any]:
    """JSON-able evidence for a ``localize`` record."""
    top = loc.culprit
    differing = sorted({c.batch_size for c in loc.configs if c.verdict.culprit is not None or c.verdict.output_equal is False})
    cfg = first_culprit_config(loc)
    ev: dict[str, Any] = {
        "trials": 1,
        "failures": int(loc.diverged),
        "culprit": top,
        "culprits": loc.culprits,
        "max_ulp": max((r["max_ulp"] for r in loc.culprits if r["max_ulp"] is not None), default=0.0),
        "first": {"batch_size": cfg.batch_size, "position": cfg.position, "label": f"{top['op']} at {top['module']}"}
        if cfg is not None and top is not None else None,
        "batch_sizes": sorted({c.batch_size for c in loc.configs}),
        "configs": [
            {"batch_size": c.batch_size, "position": c.position, "output_equal": c.verdict.output_equal,
             "compared": c.verdict.compared, "differing": c.verdict.differing, "mixing": c.verdict.mixing,
             "layout_events": c.verdict.layout_events[:5], "unknown_layouts": c.verdict.unknown_layouts,
             "coarse": c.coarse[:5], "seconds": round(c.seconds, 3),
             "culprit": None if c.verdict.culprit is None else f"{c.verdict.culprit.op} at {c.verdict.culprit.path}"}
            for c in loc.configs
        ],
        "ops": loc.ops,
        "events": loc.events,
        "seconds": round(loc.seconds, 3),
    }  # fmt: skip
    if differing:
        ev["differing_batch_sizes"] = differing
    if cfg is not None:
        ev["drift"] = cfg.verdict.drift
    if loc.nondeterministic:
        ev["nondeterministic"] = "the probe alone gave other bits when repeated"
    return ev
