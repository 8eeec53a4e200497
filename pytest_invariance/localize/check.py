"""A localization and its planted control as one check: what the fixture and the CLI judge.

Both turn a :class:`Checked` into a verdict through the same rule (``oracles.verdict``): a
culprit or a differing output is ``divergent``; no difference is ``invariant`` only when the
planted control named its module, else ``vacuous``; a raise is ``incomplete``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .control import ControlRun, planted_control
from .report import evidence, summary
from .run import Localization, localize


@dataclass
class Checked:
    """The subject's localization (or why it raised) and the control's."""

    result: Localization | None
    error: str | None
    control: ControlRun | None
    subject: dict[str, Any] = field(default_factory=dict)  # record fields: dtype, quantization, shape, mode

    @property
    def diverged(self) -> bool | None:
        return None if self.result is None else self.result.diverged

    @property
    def evidence(self) -> dict[str, Any]:
        return evidence(self.result) if self.result is not None else {}

    @property
    def summary(self) -> str:
        return summary(self.result) if self.result is not None else f"localize: raised {self.error}"

    def control_evidence(self) -> dict[str, Any]:
        c = self.control
        if c is None or c.result is None:
            return {}
        top = c.result.culprit
        return {"planted": c.path or c.name, "named": None if top is None else top["module"], "max_ulp": None if top is None else top["max_ulp"]}


def _dtype(model: Any) -> torch.dtype | None:
    if isinstance(model, torch.nn.Module):
        p = next(model.parameters(), None)
        return None if p is None else p.dtype
    return None


def run_check(
    model: Any,
    probe: torch.Tensor,
    neighbours: torch.Tensor,
    *,
    control: bool = True,
    control_site: str | None = None,
    **kw: Any,
) -> Checked:
    """Localize ``model`` and, when ``control``, its planted copy, with the same probe and batches
    (``kw``: :func:`localize`'s options, ``batch_sizes``, ``positions``, ``call``, ``keep_numel``)."""
    from pytest_invariance.oracles.vocabulary import quantization_of
    from pytest_invariance.reference_kernels import is_enabled

    batch_sizes: Sequence[int] = kw.setdefault("batch_sizes", (1, 8, 64))
    dtype = _dtype(model)
    subject = {
        "dtype": None if dtype is None else str(dtype).removeprefix("torch."),
        "quantization": None if dtype is None else quantization_of(dtype),
        "mode": "invariant" if is_enabled() else "default",
        "shape": {"probe": list(probe.shape), "batch_sizes": sorted(set(batch_sizes))},
    }
    try:
        result, error = localize(model, probe, neighbours, **kw), None
    except Exception as exc:  # noqa: BLE001 - a forward that raises is evidence: the check is incomplete
        result, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    ctl = planted_control(model, probe, neighbours, site=control_site, **kw) if control and error is None else None
    return Checked(result, error, ctl, subject)
