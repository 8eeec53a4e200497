"""The compatibility matrix: records in, matrix.md / .html / .csv / .json out.

``model`` builds the :class:`~.model.Matrix` once (latest record per configuration, cells); the
renderers (``markdown``, ``html`` with ``series`` for its plots, ``tables`` for csv and json) only
read it. Output is a pure function of the records (sorted everywhere, no generation time), so a
committed matrix only changes when a verdict does. Importing this package does not import torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .html import render_html
from .markdown import render_markdown
from .model import Matrix, build_cells, evidence_parts, impl_label, latest_records
from .series import divergence_series
from .tables import render_csv, render_json

__all__ = ["Matrix", "build_cells", "divergence_series", "evidence_parts", "impl_label", "latest_records",
           "render_matrix"]  # fmt: skip


def render_matrix(records: Iterable[Mapping[str, Any]], out_dir: str | Path) -> dict[str, Path]:
    """Write matrix.md, matrix.html, matrix.csv and matrix.json under ``out_dir``; returns their paths."""
    m = Matrix.build(records)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = {"md": render_markdown(m), "html": render_html(m), "csv": render_csv(m), "json": render_json(m)}
    paths = {}
    for ext, text in texts.items():
        p = out / f"matrix.{ext}"
        p.write_text(text, encoding="utf-8")
        paths[ext] = p
    return paths
