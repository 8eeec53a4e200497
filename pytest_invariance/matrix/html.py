"""matrix.html: the glance table in colour (details on click), filters, the plots, the hardware.

The first screen answers "what is invariant where": real implementations by family, one symbol
per oracle, a cell coloured by its worst verdict. The positive controls are folded below in their
own section, where a divergent cell is blue ("the control fired"), not red. Each cell opens to
its full evidence, and each hardware class to its plots, both loaded on demand from one embedded
gzip-compressed JSON document: a fleet's matrix (20 hardware classes, several software stacks)
would be tens of megabytes with every cell's evidence and every plot inlined. One self-contained
file (a few lines of script, no network) that renders the same bytes for the same records.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections import defaultdict
from html import escape

from .. import plots
from ..oracles.verdict import VERDICTS
from ..oracles.vocabulary import ORACLE_SHORT, VERDICT_SYMBOLS
from .build import Matrix
from .glance import CHANGED_MARK, Glance, Section, glance, is_control
from .model import (
    _HW_FIELDS,
    VERDICT_COLOURS,
    VERDICT_MEANING,
    _contracts,
    _hw_value,
    _summary_line,
    impl_label,
)
from .series import (
    PlotItem,
    class_series,
    divergence_series,
    drift_series,
    first_divergence_counts,
    unique_series,
)

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
div.scroll { overflow-x: auto; max-width: 100%; }
"""
_FILTER_JS = """
function invFilter() {
  const hw = document.getElementById('f-hw').value, fam = document.getElementById('f-fam').value;
  document.querySelectorAll('[data-hw]').forEach(e => { e.hidden = hw !== '' && e.dataset.hw !== hw; });
  document.querySelectorAll('tr[data-family]').forEach(e => { e.hidden = fam !== '' && e.dataset.family !== fam; });
}
let invDoc = null;
async function invData() {
  if (invDoc === null) {
    const b64 = document.getElementById('inv-data').textContent.trim();
    const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
    const text = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    invDoc = await new Response(text).json();
  }
  return invDoc;
}
async function invFill(d) {
  if (d.dataset.loaded) return;
  d.dataset.loaded = '1';
  const doc = await invData();
  const html = d.dataset.c !== undefined ? doc.cells[d.dataset.c] : doc.plots[d.dataset.plots];
  d.insertAdjacentHTML('beforeend', html || '');
}
document.addEventListener('toggle', e => {
  const d = e.target;
  if (d.open && (d.dataset.c !== undefined || d.dataset.plots !== undefined)) invFill(d);
}, true);
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


class _Blob:
    """What the page loads on demand: cell evidence and plots as HTML, by id (gzip + base64)."""

    def __init__(self) -> None:
        self.cells: list[str] = []
        self.plots: dict[str, str] = {}

    def cell(self, html: str) -> int:
        self.cells.append(html)
        return len(self.cells) - 1

    def script(self) -> str:
        doc = json.dumps({"cells": self.cells, "plots": self.plots}, ensure_ascii=False, separators=(",", ":"))
        packed = base64.b64encode(gzip.compress(doc.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")
        return f'<script type="application/gzip+base64" id="inv-data">{packed}</script>'


def _table(section: Section, g: Glance, blob: _Blob) -> list[str]:
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
                f'<td class="cell v-{cell.verdict}" data-hw="{escape(hw)}"><details data-c="{blob.cell(lines)}"><summary>'
                f"{escape(cell.text)}</summary></details></td>"
            )
        out.append("</tr>")
    out.append("</tbody></table>")
    return out


def render_html(m: Matrix) -> str:
    g = glance(m)
    blob = _Blob()
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
        f"{escape(_summary_line(m))}.</p>",
        f'<p class="legend">{legend} — a cell takes the colour of its worst verdict; click it for the evidence; '
        f"{CHANGED_MARK} marks a verdict that changed between software stacks. "
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
        out.append('<div class="scroll">')  # a fleet has more columns than a screen is wide
        out += _table(section, g, blob)
        out.append("</div>")
        out.append("</section></details>" if control else "</section>")
    if g.footnotes:
        out.append('<h2>Notes</h2><ol class="notes">' + "".join(f"<li>{escape(t)}</li>" for t in g.footnotes) + "</ol>")
    real = [p for p in m.plots if not is_control(p.family, p.implementation, p.mode)]
    controls = [p for p in m.plots if is_control(p.family, p.implementation, p.mode)]
    out.append('<section class="plots"><h2>Plots: real implementations</h2>')
    out += _plot_sections("real", real, blob)
    out.append("</section>")
    if controls:
        out.append('<details class="controls"><summary>Plots: positive controls</summary><section class="plots controls">')
        out += _plot_sections("controls", controls, blob)
        out.append("</section></details>")
    out += _hardware(m)
    out.append(blob.script())
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _hardware(m: Matrix) -> list[str]:
    fps = m.hardware
    if not fps:
        return []
    out = ['<h2>Hardware</h2><div class="scroll"><table><thead><tr><th>hardware</th>']
    out += [f"<th>{escape(label)}</th>" for label, _, _ in _HW_FIELDS]
    out.append("</tr></thead><tbody>")
    for name, fp in fps.items():
        vals = "".join(f"<td>{escape(_hw_value(fp, s, f))}</td>" for _, s, f in _HW_FIELDS)
        out.append(f"<tr><td>{escape(name)}</td>{vals}</tr>")
    out.append("</tbody></table></div>")  # one column per identity field: wider than a screen
    return out


def _plot_sections(section: str, items: list[PlotItem], blob: _Blob) -> list[str]:
    """One folded group of plots per hardware class, drawn now and loaded when opened."""
    by_hw: dict[str, list[PlotItem]] = defaultdict(list)
    for item in items:
        by_hw[item.hardware].append(item)
    if not by_hw:
        return ['<p class="empty">No record reports batch sizes, classes or samples.</p>']
    out = ['<p class="meta">Open a hardware class to draw its plots.</p>']
    for hw in sorted(by_hw):
        key = f"{section}|{hw}"
        blob.plots[key] = "\n".join(_plots(hw, by_hw[hw]))
        out.append(f'<details class="plots-hw" data-hw="{escape(hw)}" data-plots="{escape(key)}">'
                   f"<summary>{escape(hw)}</summary></details>")  # fmt: skip
    return out


def _plots(hw: str, items: list[PlotItem]) -> list[str]:
    out = ["<h3>Divergence vs batch size</h3>"]
    div = divergence_series(items, with_hardware=False)
    if div:
        out.append(plots.divergence_strip(div, f"{hw}: probe row differs from batch size 1 at N"))
    else:
        out.append('<p class="empty">No record reports batch sizes.</p>')
    out.append("<h3>First divergence</h3>")
    firsts = first_divergence_counts(items)
    if firsts:
        for name, bars in firsts.items():
            total = sum(c for _, c in bars)
            out.append(plots.histogram(bars, f"{name}: first differing batch size ({total} divergent records)",
                                       "batch size N at which the record first differed"))  # fmt: skip
    else:
        out.append('<p class="empty">No divergent record with a first differing batch size.</p>')
    out.append("<h3>Equivalence classes</h3>")
    classes = class_series(items)
    if classes:
        out.append(plots.class_bands(classes, f"{hw}: batch sizes grouped by bit-identical probe output"))
    else:
        out.append('<p class="empty">No record reports equivalence classes.</p>')
    drift = drift_series(items)
    if drift:
        out.append("<h3>Localization: drift after the culprit</h3>")
        out.append(plots.drift_chart(drift, "Max ULP of the probe row per layer, at the largest batch"))
    uniq = unique_series(items, with_hardware=False)  # the group names the hardware
    if uniq:
        out.append("<h3>Engine: unique samples vs concurrency</h3>")
        out.append(plots.small_multiples(uniq, "Unique completions of one prompt (1 everywhere: invariant)",
                                         "concurrency", "unique"))  # fmt: skip
    return out
