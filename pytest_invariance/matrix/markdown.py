"""matrix.md: the table a reader scans first, with the hardware and the contract."""

from __future__ import annotations

from ..oracles.verdict import (
    VERDICTS,
)
from .model import (
    _HW_FIELDS,
    VERDICT_MEANING,
    Matrix,
    _contracts,
    _grid,
    _hw_value,
    _summary_line,
    hardware_fingerprints,
    impl_label,
)


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(m: Matrix) -> str:
    recs_in, recs, cells = m.records_read, m.recs, m.cells
    rows, hardware, grid = _grid(cells, recs)
    out = [
        "# Invariance matrix",
        "",
        f"Contract(s): **{', '.join(_contracts(cells))}**. " + _summary_line(recs_in, recs, cells) + ".",
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
                text = f"**{g['verdict']}**: " + " · ".join(t for _, t in g["lines"])
                if g["cost"]:
                    text += f" · cost: {g['cost']}"
                line.append(text)
            out.append("| " + " | ".join(_md_escape(x) for x in line) + " |")
        out.append("")
    fps = hardware_fingerprints(recs)
    if fps:
        out += ["## Hardware", ""]
        out.append("| hardware | " + " | ".join(label for label, _, _ in _HW_FIELDS) + " |")
        out.append("|" + "---|" * (len(_HW_FIELDS) + 1))
        for name, fp in fps.items():
            vals = [_hw_value(fp, s, f) for _, s, f in _HW_FIELDS]
            out.append("| " + " | ".join(_md_escape(x) for x in [name, *vals]) + " |")
        out.append("")
    return "\n".join(out)
