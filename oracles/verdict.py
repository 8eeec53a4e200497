"""Verdicts: the one-word answer every check ends in, and how it is decided.

Only ``invariant`` backed by a positive control that diverged is a clean pass;
equality without a diverging control is ``vacuous`` because the check could not
have seen a divergence had there been one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .vocabulary import DIVERGENT, INCOMPLETE, INVARIANT, UNSUPPORTED, VACUOUS, VERDICTS

__all__ = ["DIVERGENT", "INCOMPLETE", "INVARIANT", "UNSUPPORTED", "VACUOUS", "VERDICTS", "SEVERITY", "decide"]

# Worst first: used to pick the cell of a matrix when several records meet.
SEVERITY = {DIVERGENT: 0, INCOMPLETE: 1, VACUOUS: 2, UNSUPPORTED: 3, INVARIANT: 4}


def decide(
    diverged: bool | None,
    control_diverged: bool | None,
    *,
    error: bool = False,
    unsupported: bool = False,
) -> str:
    """Turn what was observed into a verdict.

    ``diverged`` is whether the implementation under test showed any
    divergence; ``control_diverged`` whether its named positive control did
    (``None`` when no control was run, which can never support ``invariant``).
    """
    if unsupported:
        return UNSUPPORTED
    if error or diverged is None:
        return INCOMPLETE
    if diverged:
        return DIVERGENT
    if control_diverged:
        return INVARIANT
    return VACUOUS


def worst(verdicts: list[str]) -> str:
    """The most severe of several verdicts (divergent beats everything)."""
    if not verdicts:
        return INCOMPLETE
    return min(verdicts, key=lambda v: SEVERITY.get(v, -1))


def check_verdict(value: str) -> str:
    if value not in VERDICTS:
        raise ValueError(f"unknown verdict {value!r}; expected one of {', '.join(VERDICTS)}")
    return value


def vacuous_by_construction(rec: Mapping[str, Any]) -> str | None:
    """The declared reason a ``vacuous`` record could never have diverged, or None.

    A suite declares it (``extra.vacuous_by_construction``) for configurations
    where every correct implementation returns the same bits whatever the
    schedule: attention over one key returns v exactly. Such a record says
    nothing about the implementation, so it does not pull its cell down to
    ``vacuous`` when other configurations of the cell were tested; it is
    counted and named in the cell's evidence instead. Any other verdict
    counts as usual (a divergence at one key is a real failure).
    """
    extra = rec.get("extra") if isinstance(rec.get("extra"), Mapping) else {}
    reason = extra.get("vacuous_by_construction")
    return str(reason) if rec.get("verdict") == VACUOUS and reason else None
