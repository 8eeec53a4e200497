"""The fuzz check on a live target: preflight, search, reproducer, and the outcome the judge reads.

Shared by ``suites/e2e/test_fuzz.py`` and ``pytest-invariance fuzz URL``. A target's run is
computed once per session and budget (the control's run serves both the invariance test and the
inverse test). The example database and the reproducers live under one directory: the database
per target identity (engine, model, mode and fuzz space; never the URL, whose port changes), the
reproducers as ``reproducers/fuzz-repro-<digest>.py`` with the workload as JSON beside them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from pytest_invariance.fuzz import Budget, Result, Space, fuzz, space_for
from pytest_invariance.fuzz import reproducer as R
from pytest_invariance.fuzz.params import Accepted, preflight
from pytest_invariance.oracles.vocabulary import WORKLOAD

from .outcome import Outcome
from .target import Target

ORACLE = WORKLOAD
# (examples, seconds) of the target's search by profile; shrinking has its own seconds after a failure
TARGET_BUDGET = {"quick": (50, 300.0), "full": (200, 1200.0), "exhaustive": (1000, 3600.0)}
SHRINK_S = 120.0
# The control stops at its first failure: 60 s to find one, 100 s to shrink it (the goal: found and
# shrunk to <= 2 requests within 3 minutes on a 2-core CPU).
CONTROL_BUDGET = Budget(examples=200, seconds=60.0, shrink_seconds=100.0)


@dataclass(frozen=True)
class FuzzOptions:
    """A session's fuzz settings: the target's budget, the control's, and where files go."""

    target: Budget
    control: Budget
    directory: Path
    probe_tokens: int | None = None


def options(profile: str, directory: Path, examples: int | None = None, seconds: float | None = None,
            probe_tokens: int | None = None) -> FuzzOptions:  # fmt: skip
    """The profile's budget, with ``examples`` / ``seconds`` given on the command line taking over.
    A small ``seconds`` also shortens the control's shrinking (``make test`` runs a small budget)."""
    n, s = TARGET_BUDGET.get(profile, TARGET_BUDGET["quick"])
    n, s = examples or n, seconds or s
    shrink = min(SHRINK_S, s)
    control = CONTROL_BUDGET if seconds is None else Budget(200, CONTROL_BUDGET.seconds, min(CONTROL_BUDGET.shrink_seconds, s))
    return FuzzOptions(Budget(n, s, shrink), control, directory, probe_tokens)


@dataclass
class FuzzRun:
    """One target's fuzz run and what it was run over."""

    result: Result
    space: Space | None
    accepted: Accepted | None
    budget: Budget
    reproducer: str | None = None


_RUNS: dict[tuple, FuzzRun] = {}


def _identity(t: Target, space: Space) -> str:
    info = t.info or {}
    key = [t.engine, info.get("model") or info.get("served_model_name"), t.mode, space.as_evidence()]
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_fuzz(t: Target, budget: Budget, seed: int, opts: FuzzOptions) -> FuzzRun:
    """The fuzz run on ``t`` (once per session per URL, budget and seed)."""
    key = (t.url, budget, seed, opts.probe_tokens)
    if key in _RUNS:
        return _RUNS[key]
    adapter = t.adapter
    headers = adapter._headers()
    model = adapter._model() if hasattr(adapter, "_model") else adapter.model
    text = t.options.prompts == "text"
    accepted = preflight(t.url, model, headers, text_prompts=text)
    if not accepted.routes:
        res = Result(error=f"no route answered a plain request: {json.dumps(accepted.refused)[:300]}", stopped="error")
        run = FuzzRun(res, None, accepted, budget)
    else:
        space = space_for(t.info, model=model, params=accepted.routes, seed=seed, probe_tokens=opts.probe_tokens,
                          extras=bool(getattr(adapter, "extras", False)), text_prompts=text)  # fmt: skip
        db = opts.directory / "db" / _identity(t, space)
        res = fuzz(t.url, space, budget, seed, headers=headers, database=db, label=f"{t.engine}[{t.mode}]")
        run = FuzzRun(res, space, accepted, budget)
        if res.workload is not None:
            about = {"label": t.label, "summary": res.summary(), "engine": t.engine, "mode": t.mode,
                     "model": model, "version": (t.info or {}).get("version")}  # fmt: skip
            run.reproducer = str(R.write(opts.directory / "reproducers", t.url, res.workload, res.alone, about))
    _RUNS[key] = run
    return run


def outcome(run: FuzzRun) -> Outcome:
    """The run as a sweep :class:`Outcome` (the judge's input); ``evidence`` has the budget and space."""
    r = run.result
    ev = {**r.evidence(), "budget": {"examples": run.budget.examples, "seconds": run.budget.seconds,
                                     "shrink_seconds": run.budget.shrink_seconds}}  # fmt: skip
    space = r.space or run.space
    if space is not None:
        ev["space"] = space.as_evidence()
    if run.accepted is not None:
        ev["parameters"] = run.accepted.as_evidence()
    if run.reproducer:
        ev["reproducer"] = run.reproducer
    shape = {"sweep": "fuzz", "examples": run.budget.examples, "seconds": run.budget.seconds,
             **({"probe_tokens": len(run.space.probe_ids), "probe_max_tokens": run.space.probe_max_tokens} if run.space else {})}  # fmt: skip
    return Outcome(r.diverged, ev, r.summary(), shape, error=r.error)


def record_extra(run: FuzzRun) -> dict:
    """``extra.workload`` (the shrunk workload, as data), its reproducer, the probe alone."""
    r = run.result
    extra: dict = {}
    if r.workload is not None:
        extra.update(workload=r.workload, reproducer=run.reproducer, probe_alone=r.alone)
    elif r.first is not None:
        extra["first_failing_workload"] = r.first  # not reproducible: kept as found, never as a cause
    return extra
