"""Workload fuzzing: which co-running workload changes a greedy probe's bits (hypothesis finds and
shrinks it; a standalone reproducer is written for it). ``wire`` sends and compares (stdlib +
``requests`` only: it is the reproducer's body), ``params`` the request fields and the target's
preflight, ``strategies`` and ``space`` what is generated, ``search`` the budgeted run,
``reproducer`` the script. No pytest here: the e2e check and the CLI judge and record."""

from .search import Budget, Result, fuzz
from .space import space_for
from .strategies import Space

__all__ = ["Budget", "Result", "Space", "fuzz", "space_for"]
