"""matrix.html: the glance table in colour (details on click), filters, the plots, the hardware.

The first screen answers "what is invariant where": real implementations by family, one symbol
per oracle, a cell coloured by its worst verdict. The positive controls are folded below in their
own section, where a divergent cell is blue ("the control fired"), not red. Each cell opens to
its full evidence. Plain HTML, inline CSS and SVG and a few lines of script for the filters: one
self-contained file that renders the same bytes for the same records.
"""

from __future__ import annotations

from html import escape

from .. import plots
from ..oracles.verdict import VERDICTS
from ..oracles.vocabulary import ORACLE_SHORT, VERDICT_SYMBOLS
from ..records import Record
from .glance import Glance, Section, glance, is_control
from .model import (
    _HW_FIELDS,
    VERDICT_COLOURS,
    VERDICT_MEANING,
    Matrix,
    _contracts,
    _hw_value,
    _summary_line,
    hardware_fingerprints,
    hardware_name,
    impl_label,
)
from .series import class_series, divergence_series, drift_series, first_divergence_counts, unique_series

FIRED = "#bbdefb"  # a positive control that diverged: what the checks need
_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #bbb; padding: 3px 7px; vertical-align: top; text-align: left; font-size: 13px; }
th { background: #f4f4f4; position: sticky; top: 0; }
tr.fam td { background: #fafafa; font-weight: bold; }
td.cell { white-space: nowrap; }
td.cell details summary { cursor: pointer; list-style: none; }
td.cell details[open] { white-space: normal; min-width: 22em; }
div.o { margin: 2px 0; padding: 1px 4px; border-radius: 3px; white-space: normal; }
span.badge { padding: 1px 6px; border-radius: 3px; border: 1px solid #999; }
.meta { color: #444; }
section.plots svg { display: block; margin: 1em 0; max-width: 100%; height: auto; }
p.empty { color: #777; font-style: italic; }
details.controls > summary { font-size: 1.3em; font-weight: bold; cursor: pointer; margin: 1em 0 0.3em; }
section.controls .v-divergent { background: FIRED; }
ol.notes li { margin: 2px 0; }
"""
_FILTER_JS = """
function invFilter() {
  const hw = document.getElementById('f-hw').value, fam = document.getElementById('f-fam').value;
  document.querySelectorAll('[data-hw]').forEach(e => { e.hidden = hw !== '' && e.dataset.hw !== hw; });
  document.querySelectorAll('tr[data-family]').forEach(e => { e.hidden = fam !== '' && e.dataset.family !== fam; });
}
"""


def _verdict_css() -> str:
    return "\n".join(f".v-{v} {{ background: {c}; }}" for v, c in VERDICT_COLOURS.items())


def _filters(g: Glance) -> str:
    families = sorted({row[0] for s in g.sections for row in s.rows}, key=lambda f: (f == "engine", f))
    opt = lambda v: f'<option value="{escape(v)}">{escape(v)}</option>'  # noqa: E731
    return (
        '<p class="filters">Show hardware <select id="f-hw" onchange="invFilter()"><option value="">all</option>'
        + "".join(opt(h) for h in g.hardware)
        + '</select> family <select id="f-fam" onchange="invFilter()"><option value="">all</option>'
        + "".join(opt(f) for f in families)
        + "</select></p>"
    )


def _table(section: Section, g: Glance) -> list[str]:
    out = ['<table class="matrix"><thead><tr><th>implementation</th><th>quantization</th>']
    out += [f'<th data-hw="{escape(hw)}">{escape(hw)}</th>' for hw in g.hardware]
    out.append("</tr></thead><tbody>")
    family = None
    for row in section.rows:
        fam, impl, mode, quant = row
        if fam != family:
            family = fam
            out.append(f'<tr class="fam" data-family="{escape(fam)}"><td colspan="{2 + len(g.hardware)}">{escape(fam)}</td></tr>')
        out.append(f'<tr data-family="{escape(fam)}"><td>{escape(impl_label(impl, mode))}</td><td>{escape(quant or "–")}</td>')
        for hw in g.hardware:
            cell = g.cells.get((row, hw))
            if cell is None:
                out.append(f'<td class="cell" data-hw="{escape(hw)}"></td>')
                continue
            lines = "".join(f'<div class="o v-{mk.verdict}">{escape(mk.detail)}</div>' for mk in cell.marks)
            out.append(
                f'<td class="cell v-{cell.verdict}" data-hw="{escape(hw)}"><details><summary>'
                f"{escape(cell.text)}</summary>{lines}</details></td>"
            )
        out.append("</tr>")
    out.append("</tbody></table>")
    return out


def render_html(m: Matrix) -> str:
    g = glance(m)
    legend = " ".join(
        f'<span class="badge v-{v}" title="{escape(VERDICT_MEANING[v])}">{VERDICT_SYMBOLS[v]} {v}</span>' for v in VERDICTS
    )
    oracles = ", ".join(f"{short} = {name}" for name, short in ORACLE_SHORT.items())
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>pytest-invariance matrix</title>',
        f"<style>{_CSS.replace('FIRED', FIRED)}{_verdict_css()}</style><script>{_FILTER_JS}</script></head><body>",
        "<h1>Invariance matrix</h1>",
        f'<p class="meta">Contract(s): <b>{escape(", ".join(_contracts(m.cells)))}</b>. '
        f"{escape(_summary_line(m.records_read, m.recs, m.cells))}.</p>",
        f'<p class="legend">{legend} — a cell takes the colour of its worst verdict; click it for the evidence. '
        f"Oracles: {escape(oracles)}.</p>",
    ]
    if not g.sections:
        out.append('<p class="empty">No records.</p>')
    else:
        out.append(_filters(g))
    for section in g.sections:
        control = section.title == "Positive controls"
        if control:
            out.append(f'<details class="controls"><summary>{escape(section.title)}</summary><section class="controls">')
        else:
            out.append(f'<section class="real"><h2>{escape(section.title)}</h2>')
        out.append(f'<p class="meta">{escape(section.note)}.</p>')
        out += _table(section, g)
        out.append("</section></details>" if control else "</section>")
    if g.footnotes:
        out.append('<h2>Notes</h2><ol class="notes">' + "".join(f"<li>{escape(t)}</li>" for t in g.footnotes) + "</ol>")
    real = [r for r in m.recs if not is_control(r["family"], r["implementation"], r["mode"])]
    controls = [r for r in m.recs if is_control(r["family"], r["implementation"], r["mode"])]
    out.append('<section class="plots"><h2>Plots: real implementations</h2>')
    out += _plots(real)
    out.append("</section>")
    if controls:
        out.append('<details class="controls"><summary>Plots: positive controls</summary><section class="plots controls">')
        out += _plots(controls)
        out.append("</section></details>")
    out += _hardware(m)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _hardware(m: Matrix) -> list[str]:
    fps = hardware_fingerprints(m.recs)
    if not fps:
        return []
    out = ["<h2>Hardware</h2><table><thead><tr><th>hardware</th>"]
    out += [f"<th>{escape(label)}</th>" for label, _, _ in _HW_FIELDS]
    out.append("</tr></thead><tbody>")
    for name, fp in fps.items():
        vals = "".join(f"<td>{escape(_hw_value(fp, s, f))}</td>" for _, s, f in _HW_FIELDS)
        out.append(f"<tr><td>{escape(name)}</td>{vals}</tr>")
    out.append("</tbody></table>")
    return out


def _plots(recs: list[Record]) -> list[str]:
    out = ["<h3>Divergence vs batch size</h3>"]
    hardware = sorted({hardware_name(r) for r in recs})
    strips = [(hw, divergence_series([r for r in recs if hardware_name(r) == hw], with_hardware=False)) for hw in hardware]
    for hw, div in strips:
        if div:
            out.append(plots.divergence_strip(div, f"{hw}: probe row differs from batch size 1 at N"))
    if not any(div for _, div in strips):
        out.append('<p class="empty">No record reports batch sizes.</p>')
    out.append("<h3>First divergence</h3>")
    firsts = first_divergence_counts(recs)
    if firsts:
        for hw, bars in firsts.items():
            total = sum(c for _, c in bars)
            out.append(plots.histogram(bars, f"{hw}: first differing batch size ({total} divergent records)",
                                       "batch size N at which the record first differed"))  # fmt: skip
    else:
        out.append('<p class="empty">No divergent record with a first differing batch size.</p>')
    out.append("<h3>Equivalence classes</h3>")
    classes = class_series(recs)
    if classes:
        out.append(plots.class_bands(classes, "Batch sizes grouped by bit-identical probe output"))
    else:
        out.append('<p class="empty">No record reports equivalence classes.</p>')
    drift = drift_series(recs)
    if drift:
        out.append("<h3>Localization: drift after the culprit</h3>")
        out.append(plots.drift_chart(drift, "Max ULP of the probe row per layer, at the largest batch"))
    uniq = unique_series(recs)
    if uniq:
        out.append("<h3>Engine: unique samples vs concurrency</h3>")
        out.append(plots.small_multiples(uniq, "Unique completions of one prompt (1 everywhere: invariant)",
                                         "concurrency", "unique"))  # fmt: skip
    return out


