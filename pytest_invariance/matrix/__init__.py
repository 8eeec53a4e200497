"""The compatibility matrix: records in, matrix.md (glance) / matrix-full.md / .html / .csv / .json out.

``model`` builds the :class:`~.model.Matrix` once (latest record per configuration, cells); the
renderers (``markdown``, ``html`` with ``series`` for its plots, ``tables`` for csv and json) only
read it. Output is a pure function of the records (sorted everywhere, no generation time), so a
committed matrix only changes when a verdict does. Importing this package does not import torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .build import Matrix, build_cells, latest_records
from .html import render_html
from .markdown import render_glance_markdown, render_markdown
from .model import evidence_parts, impl_label
from .series import divergence_series
from .tables import render_csv, render_json

__all__ = ["Matrix", "build_cells", "divergence_series", "evidence_parts", "impl_label", "latest_records",
           "render_matrix"]  # fmt: skip


def render_matrix(records: Iterable[Mapping[str, Any]] | Matrix, out_dir: str | Path) -> dict[str, Path]:
    """Write matrix.md (glance), matrix-full.md, matrix.html, matrix.csv and matrix.json under
    ``out_dir``; returns their paths by kind (``md``, ``full-md``, ``html``, ``csv``, ``json``).
    ``records`` may be a built :class:`Matrix` (``Matrix.from_files`` streams large files)."""
    m = records if isinstance(records, Matrix) else Matrix.build(records)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "md": ("matrix.md", render_glance_markdown(m)),
        "full-md": ("matrix-full.md", render_markdown(m)),
        "html": ("matrix.html", render_html(m)),
        "csv": ("matrix.csv", render_csv(m)),
        "json": ("matrix.json", render_json(m)),
    }
    paths = {}
    for kind, (name, text) in files.items():
        p = out / name
        p.write_text(text, encoding="utf-8")
        paths[kind] = p
    return paths
