"""Changed cells against a baseline (a committed matrix, or another stack's records).

A regression is a cell that was ``invariant`` and now is not. Only cells present
in both are compared: a run that selected a subset of the suites (``-m matmul``)
must not report every other cell as lost. Improvements (divergent -> invariant)
are changes, printed by ``pytest-invariance compare``, not regressions; the
committed matrix is updated by re-rendering it. Cells match on row, hardware
class and oracle, never on the software stack: comparing stacks is the point.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .matrix import build_cells, impl_label
from .oracles.verdict import INVARIANT
from .records import parse_record

KEY_FIELDS = ("family", "implementation", "mode", "quantization", "hardware", "oracle")


class ExpectedMatrixError(Exception):
    """The expected matrix cannot be read or is not a matrix.json."""


@dataclass(frozen=True)
class Regression:
    """One cell whose verdict changed; a regression when it lost its ``invariant`` verdict."""

    family: str
    implementation: str
    mode: str | None
    quantization: str | None
    hardware: str
    oracle: str
    expected: str
    actual: str
    evidence: str
    stacks: tuple[str, str] | None = None  # (baseline's, now's) where they differ

    @property
    def regression(self) -> bool:
        return self.expected == INVARIANT and self.actual != INVARIANT

    def __str__(self) -> str:
        where = f"{self.family} / {impl_label(self.implementation, self.mode)} / {self.quantization or '–'}"
        text = f"{where} on {self.hardware}, {self.oracle}: was {self.expected}, now {self.actual} — {self.evidence}"
        return text + (f" [stack {self.stacks[0]} → {self.stacks[1]}]" if self.stacks else "")


def _key(cell: Mapping[str, Any]) -> tuple:
    return tuple(cell.get(k) or None for k in KEY_FIELDS)


def _bare(key: tuple) -> tuple:
    """The key with the hardware class cut to its name (``NVIDIA H200 · cc 9.0`` -> ``NVIDIA
    H200``): a matrix.json written before hardware classes names its columns that way."""
    i = KEY_FIELDS.index("hardware")
    return (*key[:i], str(key[i] or "").split(" · ")[0], *key[i + 1 :])


def load_expected(path: str | os.PathLike[str]) -> list[dict]:
    """The cells of a matrix.json (an object with ``cells``, or a bare list of cells)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExpectedMatrixError(f"expected matrix not found: {p}") from None
    except IsADirectoryError:
        raise ExpectedMatrixError(f"expected matrix is a directory, not a file: {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ExpectedMatrixError(f"cannot read expected matrix {p}: {e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExpectedMatrixError(
            f"expected matrix {p} is not valid JSON (line {e.lineno}: {e.msg})"
        ) from None
    cells = doc.get("cells") if isinstance(doc, dict) else doc
    if not isinstance(cells, list) or not all(
        isinstance(c, dict)
        and all(k in c for k in ("family", "implementation", "hardware", "oracle", "verdict"))
        for c in cells
    ):
        raise ExpectedMatrixError(
            f"{p} is not a matrix.json (no list of cells with family/implementation/hardware/oracle/verdict)"
        )
    return cells


def _as_cells(items: Iterable[Mapping[str, Any]]) -> list[dict]:
    """Records (hardware is an object) become cells; cells pass through."""
    items = [dict(i) for i in items]
    if items and all(isinstance(i.get("hardware"), Mapping) for i in items):
        return build_cells([parse_record(i) for i in items])
    return items


def compare_cells(baseline: Iterable[Mapping[str, Any]], now: Iterable[Mapping[str, Any]]) -> list[Regression]:
    """Cells present in both whose verdict differs, in either direction, sorted."""
    before = {_key(c): c for c in baseline}
    out = []
    for cell in now:
        old = before.get(_key(cell)) or before.get(_bare(_key(cell)))
        if old is None or old.get("verdict") == cell.get("verdict"):
            continue
        stacks = (str(old.get("stack") or "unknown stack"), str(cell.get("stack") or "unknown stack"))
        out.append(
            Regression(
                family=cell["family"],
                implementation=cell["implementation"],
                mode=cell.get("mode") or None,
                quantization=cell.get("quantization") or None,
                hardware=cell["hardware"],
                oracle=cell["oracle"],
                expected=str(old.get("verdict")),
                actual=str(cell.get("verdict")),
                evidence=str(cell.get("evidence") or ""),
                stacks=stacks if stacks[0] != stacks[1] else None,
            )
        )
    return sorted(out, key=lambda r: tuple(str(getattr(r, k) or "") for k in KEY_FIELDS))


def compare_with_expected(
    records_or_cells: Iterable[Mapping[str, Any]], expected_matrix_json_path: str | os.PathLike[str]
) -> list[Regression]:
    """Cells that were ``invariant`` in the expected matrix and are now anything else, sorted."""
    changes = compare_cells(load_expected(expected_matrix_json_path), _as_cells(records_or_cells))
    return [c for c in changes if c.regression]
