"""The positive control of a localization: the same model with one module planted (``plant``).

A localization that finds no culprit is only a clean pass if it could have found one: the
control localizes a copy of the model whose first ``nn.Linear`` is the split-K mutant, and it
counts as diverged only when the culprit it names is that planted module. The bundled engine's
model in invariant mode has no ``nn.Linear``: its control is the same model in default mode,
whose designed mechanisms (M-bucket split-K at M <= 8 rows) must produce a culprit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .plant import first_linear, plant
from .run import Localization, localize


@dataclass
class ControlRun:
    name: str  # e.g. "planted splitk-matmul at model.layers.0.self_attn.q_proj"
    path: str | None  # the planted module; None: any culprit counts
    result: Localization | None
    error: str | None = None

    @property
    def diverged(self) -> bool | None:
        """Whether the control named its planted module (None when it did not run)."""
        if self.result is None or self.error:
            return None
        return any(c.verdict.culprit is not None and (self.path is None or c.verdict.culprit.path == self.path)
                   for c in self.result.configs)  # fmt: skip


def planted_control(model: Any, probe: Any, neighbours: Any, *, site: str | None = None,
                    kind: str = "splitk-matmul", **kw: Any) -> ControlRun | None:  # fmt: skip
    """Localize ``model`` with ``site`` (default: its first Linear) planted; None without a site."""
    import torch

    from .bundled import BundledLM

    if isinstance(model, BundledLM):
        if not model.cfg.batch_invariant:
            return None
        name = "bundled default mode (M-bucket split-K, split-KV)"
        try:
            return ControlRun(name, None, localize(model.default_twin(), probe, neighbours, **kw))
        except Exception as exc:  # noqa: BLE001 - a control that raises makes the check incomplete
            return ControlRun(name, None, None, f"{type(exc).__name__}: {exc}")
    if not isinstance(model, torch.nn.Module):
        return None
    site = site or first_linear(model)
    if site is None:
        return None
    name = f"planted {kind} at {site}"
    try:
        return ControlRun(name, site, localize(plant(model, site, kind), probe, neighbours, **kw))
    except Exception as exc:  # noqa: BLE001 - a control that raises makes the check incomplete
        return ControlRun(name, site, None, f"{type(exc).__name__}: {exc}")
