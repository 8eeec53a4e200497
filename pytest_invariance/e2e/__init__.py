"""End-to-end checks against live engines: targets, sweeps and checks (public; the suites are thin).

- :mod:`.target`: a live engine, its reported configuration, and how a batch is sent;
- :mod:`.sweeps`: what each sweep sends and the :class:`~.sweeps.Outcome` it observed;
- :mod:`.checks`: a sweep and its positive control judged by :func:`pytest_invariance.judge.judge`.
"""

from __future__ import annotations

from .checks import control_record, invariant_check, inverse_check, seeded_check, seeded_inverse_check
from .sweeps import PROBE, SWEEPS, Outcome, neighbour, sweep_single
from .target import Target

__all__ = [
    "PROBE", "SWEEPS", "Outcome", "Target", "control_record", "inverse_check", "invariant_check", "neighbour",
    "seeded_check", "seeded_inverse_check", "sweep_single",
]  # fmt: skip
