"""matrix.md, the glance table a PR comment can hold, and matrix-full.md, every cell's evidence."""

from __future__ import annotations

from ..oracles.verdict import (
    VERDICTS,
)
from ..oracles.vocabulary import ORACLE_SHORT, VERDICT_SYMBOLS
from .build import Matrix
from .glance import CHANGED_MARK, glance, strip_urls
from .model import (
    _HW_FIELDS,
    VERDICT_MEANING,
    _contracts,
    _grid,
    _hw_value,
    _summary_line,
    impl_label,
)


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _legend() -> str:
    verdicts = " · ".join(f"{VERDICT_SYMBOLS[v]} {v}" for v in VERDICTS)
    oracles = ", ".join(f"{short} = {name}" for name, short in ORACLE_SHORT.items())
    return (f"{verdicts}; a blank cell was not run there; {CHANGED_MARK} marks a verdict that changed between "
            f"software stacks. Oracles: {oracles}.")


def render_glance_markdown(m: Matrix) -> str:
    """One symbol per oracle and cell; evidence in matrix-full.md and matrix.html."""
    g = glance(m)
    out = [
        "# Invariance matrix",
        "",
        f"Contract(s): **{', '.join(_contracts(m.cells))}**. {_summary_line(m)}.",
        "",
        _legend() + " Evidence for every cell: `matrix-full.md`, `matrix.html`.",
        "",
    ]
    if not g.sections:
        return "\n".join([*out, "No records.", ""])
    head = ["family", "implementation", "quantization", *g.hardware]
    for section in g.sections:
        out += [f"## {section.title}", "", f"_{section.note}._", ""]
        out.append("| " + " | ".join(_md_escape(h) for h in head) + " |")
        out.append("|" + "---|" * len(head))
        for row in section.rows:
            fam, impl, mode, quant = row
            line = [fam, impl_label(impl, mode), quant or "–"]
            line += [g.cells[(row, hw)].text if (row, hw) in g.cells else "" for hw in g.hardware]
            out.append("| " + " | ".join(_md_escape(x) for x in line) + " |")
        out.append("")
    if g.footnotes:
        out += ["## Notes", ""] + [f"{i}. {_md_escape(t)}" for i, t in enumerate(g.footnotes, 1)] + [""]
    out += _hardware_table(m)
    return "\n".join(out)


def _hardware_table(m: Matrix) -> list[str]:
    fps = m.hardware
    if not fps:
        return []
    out = ["## Hardware", ""]
    out.append("| hardware | " + " | ".join(label for label, _, _ in _HW_FIELDS) + " |")
    out.append("|" + "---|" * (len(_HW_FIELDS) + 1))
    for name, fp in fps.items():
        vals = [_hw_value(fp, s, f) for _, s, f in _HW_FIELDS]
        out.append("| " + " | ".join(_md_escape(x) for x in [name, *vals]) + " |")
    out.append("")
    return out


def render_markdown(m: Matrix) -> str:
    """matrix-full.md: each cell's worst verdict, then every oracle with its evidence."""
    cells = m.cells
    rows, hardware, grid = _grid(m)
    out = [
        "# Invariance matrix (full evidence)",
        "",
        f"Contract(s): **{', '.join(_contracts(cells))}**. " + _summary_line(m) + ".",
        "",
        "Each cell: the worst verdict in bold, then one verdict per oracle with its evidence; "
        "`–` means not run on that hardware.",
        "",
    ]
    out += [f"- **{v}**: {VERDICT_MEANING[v]}" for v in VERDICTS]
    out.append("")
    if not rows:
        out += ["No records.", ""]
    else:
        head = ["family", "implementation", "quantization", *hardware]
        out.append("| " + " | ".join(_md_escape(h) for h in head) + " |")
        out.append("|" + "---|" * len(head))
        for row in rows:
            fam, impl, mode, quant = row
            line = [fam, impl_label(impl, mode), quant or "–"]
            for hw in hardware:
                g = grid.get((row, hw))
                if g is None:
                    line.append("–")
                    continue
                text = f"**{g['verdict']}**: " + " · ".join(strip_urls(t) for _, t in g["lines"])
                if g["cost"]:
                    text += f" · cost: {g['cost']}"
                line.append(text)
            out.append("| " + " | ".join(_md_escape(x) for x in line) + " |")
        out.append("")
    out += _hardware_table(m)
    return "\n".join(out)
