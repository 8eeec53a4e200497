"""Failure rates with honest uncertainty: failures/N and a 95% Wilson interval."""

from __future__ import annotations

import math


def wilson_interval(failures: int, trials: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95% Wilson score interval for a failure proportion.

    Chosen over the normal approximation because it stays inside [0, 1] and is
    informative at 0/N, the common case for an invariant kernel.
    """
    if trials <= 0:
        return (0.0, 1.0)
    if not 0 <= failures <= trials:
        raise ValueError(f"failures={failures} must lie in 0..trials={trials}")
    p = failures / trials
    z2 = z * z
    denom = 1.0 + z2 / trials
    centre = (p + z2 / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / denom
    lo = 0.0 if failures == 0 else max(0.0, centre - half)
    hi = 1.0 if failures == trials else min(1.0, centre + half)
    return (lo, hi)


def failure_summary(failures: int, trials: int) -> dict:
    lo, hi = wilson_interval(failures, trials)
    return {
        "failures": failures,
        "trials": trials,
        "rate": (failures / trials) if trials else None,
        "wilson95": [round(lo, 6), round(hi, 6)],
    }


def weakest_pass(records: list) -> tuple[int, int, float] | None:
    """(trials, failures, 95% Wilson upper bound) of the weakest ``invariant`` record, or None.

    The weakest is the one whose failure rate is bounded least tightly; a record's trials come
    from its evidence, else from the record itself (e2e checks run one)."""
    best: tuple[float, int, int] | None = None
    for r in records:
        if r.get("verdict") != "invariant":
            continue
        ev = r.get("evidence") if isinstance(r.get("evidence"), dict) else {}
        trials = int(ev.get("trials") or r.get("trials") or 1)
        failures = int(ev.get("failures") or 0)
        hi = wilson_interval(failures, trials)[1]
        if best is None or (hi, trials, failures) > best:
            best = (hi, trials, failures)
    return None if best is None else (best[1], best[2], best[0])
