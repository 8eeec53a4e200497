"""matrix.html: the table in colour, and the plots (divergence vs batch size, first divergence, classes)."""

from __future__ import annotations

from html import escape

from .. import plots
from ..oracles.verdict import (
    VERDICTS,
)
from .model import (
    _HW_FIELDS,
    VERDICT_COLOURS,
    VERDICT_MEANING,
    Matrix,
    _contracts,
    _grid,
    _hw_value,
    _summary_line,
    hardware_fingerprints,
    impl_label,
)
from .series import class_series, divergence_series, first_divergence_counts, unique_series

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #bbb; padding: 4px 8px; vertical-align: top; text-align: left; font-size: 13px; }
th { background: #f4f4f4; }
td.cell { min-width: 16em; }
div.o { margin: 2px 0; padding: 1px 4px; border-radius: 3px; }
div.cost { margin-top: 4px; font-style: italic; }
span.badge { padding: 1px 6px; border-radius: 3px; border: 1px solid #999; }
.meta { color: #444; }
section.plots svg { display: block; margin: 1em 0; }
p.empty { color: #777; font-style: italic; }
"""


def _verdict_css() -> str:
    return "\n".join(f".v-{v} {{ background: {c}; }}" for v, c in VERDICT_COLOURS.items())


def render_html(m: Matrix) -> str:
    recs_in, recs, cells = m.records_read, m.recs, m.cells
    rows, hardware, grid = _grid(cells, recs)
    contracts = ", ".join(_contracts(cells))
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>pytest-invariance matrix</title>',
        f"<style>{_CSS}{_verdict_css()}</style></head><body>",
        "<h1>Invariance matrix</h1>",
        f'<p class="meta">Contract(s): <b>{escape(contracts)}</b>. {escape(_summary_line(recs_in, recs, cells))}.</p>',
        '<p class="legend">'
        + " ".join(
            f'<span class="badge v-{v}" title="{escape(VERDICT_MEANING[v])}">{v}</span>' for v in VERDICTS
        )
        + " — a cell takes the colour of its worst verdict.</p>",
    ]
    if not rows:
        out.append('<p class="empty">No records.</p>')
    else:
        out.append(
            '<table class="matrix"><thead><tr><th>family</th><th>implementation</th><th>quantization</th>'
        )
        out += [f"<th>{escape(hw)}</th>" for hw in hardware]
        out.append("</tr></thead><tbody>")
        for row in rows:
            fam, impl, mode, quant = row
            out.append(
                f"<tr><td>{escape(fam)}</td><td>{escape(impl_label(impl, mode))}</td><td>{escape(quant or '–')}</td>"
            )
            for hw in hardware:
                g = grid.get((row, hw))
                if g is None:
                    out.append('<td class="cell">–</td>')
                    continue
                inner = "".join(f'<div class="o v-{v}">{escape(t)}</div>' for v, t in g["lines"])
                if g["cost"]:
                    inner += f'<div class="cost">cost: {escape(g["cost"])}</div>'
                out.append(f'<td class="cell v-{g["verdict"]}">{inner}</td>')
            out.append("</tr>")
        out.append("</tbody></table>")
    out.append('<section class="plots"><h2>Plots</h2>')
    out += _plots(recs)
    out.append("</section>")
    fps = hardware_fingerprints(recs)
    if fps:
        out.append("<h2>Hardware</h2><table><thead><tr><th>hardware</th>")
        out += [f"<th>{escape(label)}</th>" for label, _, _ in _HW_FIELDS]
        out.append("</tr></thead><tbody>")
        for name, fp in fps.items():
            vals = "".join(f"<td>{escape(_hw_value(fp, s, f))}</td>" for _, s, f in _HW_FIELDS)
            out.append(f"<tr><td>{escape(name)}</td>{vals}</tr>")
        out.append("</tbody></table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"




def _plots(recs: list[dict]) -> list[str]:
    out = ["<h3>Divergence vs batch size</h3>"]
    div = divergence_series(recs)
    if div:
        out.append(plots.divergence_strip(div, "Probe row differs from batch size 1 at N"))
    else:
        out.append('<p class="empty">No record reports batch sizes.</p>')
    out.append("<h3>First divergence</h3>")
    firsts = first_divergence_counts(recs)
    if firsts:
        for hw, bars in firsts.items():
            total = sum(c for _, c in bars)
            out.append(
                plots.histogram(bars, f"{hw}: first differing batch size ({total} divergent)", "batch size N")
            )
    else:
        out.append('<p class="empty">No divergent record with a first differing batch size.</p>')
    out.append("<h3>Equivalence classes</h3>")
    classes = class_series(recs)
    if classes:
        out.append(plots.class_bands(classes, "Batch sizes grouped by bit-identical probe output"))
    else:
        out.append('<p class="empty">No record reports equivalence classes.</p>')
    uniq = unique_series(recs)
    if uniq:
        out.append("<h3>Engine: unique samples vs concurrency</h3>")
        out.append(plots.line_chart(uniq, "Unique completions of one prompt", "concurrency", "unique"))
    return out
