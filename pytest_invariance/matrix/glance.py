"""The glance view of the matrix: what is invariant where, in one symbol per oracle.

Why a second view: the full cells carry every fact (first differing N, max ULP, trials), which is
what a reader needs once they know *where* to look, not before. Here real implementations come
first, grouped by family; the positive controls (mutants, and the bundled engine's default mode,
whose batch dependence is designed) sit in their own section, where ✘ means "the control fired".
Notes that many cells share (vacuous by construction, a pass whose zoo power is short of every
class, or a weak pass where no zoo class speaks, a control on another engine) are numbered once
as footnotes. Endpoint URLs, which change every run, never appear.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from ..oracles.verdict import INVARIANT, worst
from ..oracles.vocabulary import CONTROL_VARIANTS, ORACLE_SHORT, PERF, VERDICT_SYMBOLS
from .build import Matrix
from .model import FAMILY_ORDER, _rank

_URL = re.compile(r"\s*@\s*https?://\S+?(?=[\s,;)\]]|$)")
WEAK_NOTE = ("a pass on fewer than 3 clean trials: too few to bound its failure rate usefully "
             "(each pass's trials and 95% bound are in matrix-full.md)")
FOREIGN_NOTE = "the positive control ran on another engine than the subject"
CHANGED_MARK = "Δ"  # the verdict changed between software stacks (both verdicts are in the evidence)




def strip_urls(text: str) -> str:
    """``bundled [default] @ http://127.0.0.1:50781`` -> ``bundled [default]``: ports change every run."""
    return _URL.sub("", text)


def is_control(family: str, implementation: str, mode: str | None) -> bool:
    """Rows that are positive controls by design: mutants, the bundled engine's default mode, and
    the bundled engine with a knob that breaks invariance on purpose (``bundled+shared-rng``)."""
    if implementation.startswith("mutant:"):
        return True
    base, *variants = implementation.split("+")
    return base == "bundled" and (mode == "default" or any(v in CONTROL_VARIANTS for v in variants))


@dataclass(frozen=True)
class Mark:
    """One oracle of one cell: its symbol, its full evidence line and its footnote numbers."""

    oracle: str
    verdict: str
    detail: str
    notes: tuple[int, ...] = ()
    changed: bool = False  # the software stacks of this cell disagree

    @property
    def text(self) -> str:
        sup = "".join(f"[{n}]" for n in self.notes)
        mark = CHANGED_MARK if self.changed else ""
        return f"{VERDICT_SYMBOLS[self.verdict]} {ORACLE_SHORT.get(self.oracle, self.oracle)}{mark}{sup}"


@dataclass(frozen=True)
class GlanceCell:
    verdict: str
    marks: tuple[Mark, ...]

    @property
    def text(self) -> str:
        return " ".join(m.text for m in self.marks)


@dataclass
class Section:
    title: str
    note: str
    rows: list[tuple] = field(default_factory=list)  # (family, implementation, mode, quantization)


@dataclass
class Glance:
    hardware: list[str]
    sections: list[Section]
    cells: dict[tuple, GlanceCell]  # (row, hardware) -> cell
    footnotes: list[str]


class _Notes:
    """Footnote numbers handed out in order of first use, one per distinct text."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def number(self, text: str) -> int:
        if text not in self.texts:
            self.texts.append(text)
        return self.texts.index(text) + 1


def _notes_of(cell: dict, notes: _Notes) -> tuple[int, ...]:
    out = []
    vbc = cell.get("vacuous_by_construction")
    if vbc:
        for reason in vbc["reasons"]:
            out.append(notes.number(f"some configurations are vacuous by construction and set aside: {reason}"))
    zoo = cell.get("power")
    if cell["verdict"] == INVARIANT and zoo and zoo["caught"] < zoo["classes"]:
        out.append(notes.number(f"a pass reached with zoo power {zoo['caught']}/{zoo['classes']} "
                                f"(blind to {', '.join(zoo.get('missed') or ['?'])})"))  # fmt: skip
    power = cell.get("weakest_pass")
    if power and power["trials"] - power["failures"] < 3 and not zoo:  # the trial bound only where no zoo spoke
        out.append(notes.number(WEAK_NOTE))
    if cell["verdict"] == INVARIANT and any("positive control on another engine" in p for p in cell["evidence_parts"]):
        out.append(notes.number(FOREIGN_NOTE))
    return tuple(out)


def glance(m: Matrix) -> Glance:
    """Build the glance view from the matrix's cells (built once, in ``Matrix.build``)."""
    notes = _Notes()
    by_key: dict[tuple, list[Mark]] = defaultdict(list)
    for cell in m.cells:  # sorted by family, implementation, ..., oracle in vocabulary order
        if cell["oracle"] == PERF:  # a speed, not a verdict on invariance: the full view shows it
            continue
        row = (cell["family"], cell["implementation"], cell["mode"], cell["quantization"])
        mark = Mark(cell["oracle"], cell["verdict"], strip_urls(cell["evidence"]), _notes_of(cell, notes),
                    bool(cell.get("changed")))  # fmt: skip
        by_key[(row, cell["hardware"])].append(mark)
    cells = {k: GlanceCell(worst([mk.verdict for mk in marks]), tuple(marks)) for k, marks in by_key.items()}
    rows = sorted({row for row, _ in cells}, key=lambda r: (_rank(FAMILY_ORDER, r[0]), r[1], r[2] or "", r[3] or ""))
    real = Section("Real implementations", "stock kernels, reference kernels, registered kernels and engines")
    controls = Section(
        "Positive controls",
        "designed to depend on the batch (mutants, the bundled engine's default mode and its "
        "invariance-breaking knobs): "
        "✘ means the control fired, which is what the checks need",
    )
    for row in rows:
        (controls if is_control(row[0], row[1], row[2]) else real).rows.append(row)
    hardware = sorted({hw for _, hw in cells})
    return Glance(hardware, [s for s in (real, controls) if s.rows], cells, notes.texts)
