"""The fuzz run: hypothesis generates workloads around the probe, finds one whose probe differs from
the probe alone, and shrinks it; this module budgets it, reports progress and tells run-to-run
nondeterminism apart from a workload that really breaks the probe.

Order of business: the probe alone twice (different bits: the target is nondeterministic before
any neighbour is added; no fuzzing); then hypothesis, seeded, with its example database (a failure
found before is tried first); then the shrunk workload replayed ``confirm_runs`` times beside the
probe alone. hypothesis's ``Flaky`` (a failing example that passed when replayed), an unstable
probe alone, or a shrunk workload that never reproduces are reported as run-to-run
nondeterminism with the first failing workload as found, never as a shrunk workload that "causes" it.
Only an unstable probe alone is called "not batch dependence": over HTTP the arrival offsets do not
pin which step requests share, so a workload that fails twice and then not again may still be one
(vLLM CPU 0.32: 2-request workloads like it reproduced alone in 6 and 9 of 15 runs).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Flaky

from pytest_invariance.adapters.progress import emit

from . import wire
from .strategies import Space, size, workloads


@dataclass(frozen=True)
class Budget:
    """Examples and wall time of the search; shrinking gets its own seconds after the first failure."""

    examples: int
    seconds: float
    shrink_seconds: float = 120.0
    confirm_runs: int = 3

    def __post_init__(self) -> None:
        if self.examples < 1 or self.seconds <= 0 or self.shrink_seconds < 0 or self.confirm_runs < 1:
            raise ValueError(f"fuzz budget needs examples >= 1, seconds > 0, shrink_seconds >= 0 and "
                             f"confirm_runs >= 1, got {self}")  # fmt: skip


@dataclass
class Result:
    """What one fuzz run on one target saw."""

    alone: dict | None = None
    generated: int = 0  # examples sent before the first failure (or in all, without one)
    runs: int = 0  # every workload sent, shrinking included
    failing_runs: int = 0
    first: dict | None = None  # the first failing workload as generated, with its difference
    workload: dict | None = None  # the shrunk failing workload
    difference: dict | None = None
    confirm: dict | None = None
    nondeterminism: str | None = None
    alone_unstable: bool = False  # the probe alone changed: run to run for certain, whatever co-ran
    error: str | None = None
    stopped: str = ""
    wall_s: float = 0.0
    shrink_s: float = 0.0
    neighbour_statuses: dict[str, int] = field(default_factory=dict)
    shrunk: bool = True  # False: hypothesis's replay was flaky: the smallest workload seen failing twice
    replay_variants: int = 1  # distinct probe differences the failing workload gave (the step it co-ran at can move)
    unreplayed: int = 0  # workloads that changed the probe once and not when sent again at once
    unreplayed_first: dict | None = None
    space: Space | None = None  # what was generated (offsets scaled by the measured probe latency)

    @property
    def diverged(self) -> bool | None:
        if self.error is not None:
            return None
        return self.workload is not None or self.nondeterminism is not None

    def evidence(self) -> dict:
        ev: dict[str, Any] = {"examples": self.generated, "runs": self.runs, "failing_runs": self.failing_runs,
                              "unreplayed_failures": self.unreplayed,
                              "stopped": self.stopped, "wall_s": round(self.wall_s, 1),
                              "neighbour_statuses": self.neighbour_statuses}  # fmt: skip
        if self.workload is not None:
            ev.update(requests=size(self.workload), first_difference=self.difference, confirm=self.confirm,
                      shrink_s=round(self.shrink_s, 1), shrunk=self.shrunk, replay_variants=self.replay_variants,
                      first={"token_index": self.difference["step"], "batch_size": size(self.workload),
                             "label": f"probe {self.difference['what']} at step {self.difference['step']}"})  # fmt: skip
        if self.nondeterminism is not None:
            ev.update(nondeterminism=self.nondeterminism, kind="run-to-run",
                      probe_alone_unstable=self.alone_unstable)  # fmt: skip
        if self.first is not None:
            ev["first_failing_requests"] = size(self.first["workload"])
        if self.error is not None:
            ev["error"] = self.error
        return ev

    def summary(self) -> str:
        head = f"{self.generated} workloads in {self.wall_s:.0f} s ({self.stopped})"
        if self.error is not None:
            return f"incomplete after {head}: {self.error}"
        if self.nondeterminism is not None and self.alone_unstable:
            return f"run-to-run nondeterminism, not batch dependence: {self.nondeterminism} [{head}]"
        if self.nondeterminism is not None:  # over HTTP, arrival offsets do not pin which step requests share
            return (f"not reproducible, so no workload is named: run-to-run nondeterminism, or co-batching "
                    f"that the workload's arrival offsets do not pin: {self.nondeterminism} [{head}]")  # fmt: skip
        if self.workload is not None:
            d, c = self.difference, self.confirm or {}
            how = f"shrunk to {size(self.workload)}" if self.shrunk else f"of {size(self.workload)} (shrinking cut short)"
            return (f"probe differs from the probe alone ({d['what']} at step {d['step']}) beside a workload "
                    f"{how} requests, reproduced {c.get('reproduced')}/{c.get('runs')} "
                    f"[{head}, {self.runs} runs with shrinking]")  # fmt: skip
        return f"probe bitwise equal to the probe alone beside every one of {head}"


class ProbeDiverged(AssertionError):
    """The property failed: the probe's ids or logprob bits differ from the probe alone."""


class _Stop(BaseException):
    """Ends hypothesis's run at once (budget spent, target unreachable): not a test failure."""


class _Search:
    def __init__(self, url: str, space: Space, budget: Budget, headers: dict, label: str) -> None:
        self.url, self.space, self.budget, self.headers, self.label = url, space, budget, headers, label
        self.result = Result()
        self.start = time.monotonic()
        self.failed_keys: set[str] = set()
        self.found_at: float | None = None
        self.last_line = 0.0
        self.smallest: tuple[dict, dict] | None = None
        self.last_failing: tuple[dict, dict] | None = None  # hypothesis replays the shrunk one last

    def deadline(self) -> float:
        if self.found_at is None:
            return self.start + self.budget.seconds
        return self.found_at + self.budget.shrink_seconds

    def progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_line < 10.0:
            return
        self.last_line = now
        r, t = self.result, now - self.start
        if self.smallest is None:
            emit(f"fuzz {self.label}: {r.generated}/{self.budget.examples} workloads, {t:.0f}/{self.budget.seconds:.0f} s, 0 failing")
        else:
            emit(f"fuzz {self.label}: shrinking, smallest failing workload {size(self.smallest[0])} requests "
                 f"after {r.runs} runs ({r.failing_runs} failing), {t:.0f} s")  # fmt: skip

    def send(self, workload: dict) -> dict:
        try:
            got = wire.run(self.url, workload, self.headers)
        except wire.WireError as exc:
            self.result.error = str(exc)
            raise _Stop("error") from None
        for n in got["neighbours"]:
            key = str(n.get("status", "error"))
            self.result.neighbour_statuses[key] = self.result.neighbour_statuses.get(key, 0) + 1
        return got

    def run_once(self, workload: dict) -> dict | None:
        got = self.send(workload)
        self.result.runs += 1
        self.progress()
        return wire.difference(self.result.alone, got["probe"])

    def prop(self, workload: dict) -> None:
        key = json.dumps(workload, sort_keys=True)
        if time.monotonic() > self.deadline():
            if self.found_at is None:
                self.result.stopped = "time budget"
                raise _Stop("time")
            if key not in self.failed_keys:
                return  # past the shrink budget: only known failures are replayed, nothing new is sent
        if self.found_at is None:
            self.result.generated += 1
        r = self.result
        d = self.run_once(workload)
        if d is None:
            return
        again = self.run_once(workload)  # a failure counts only when the same workload fails again at once
        if again is None:
            r.unreplayed += 1
            if r.unreplayed_first is None:
                r.unreplayed_first = {"workload": workload, "difference": d}
            return
        r.failing_runs += 1
        self.failed_keys.add(key)
        if self.found_at is None:
            self.found_at = time.monotonic()
            r.first = {"workload": workload, "difference": d}
            emit(f"fuzz {self.label}: workload {r.generated} breaks the probe ({d['what']} at step {d['step']}, "
                 f"{size(workload)} requests, twice); shrinking")  # fmt: skip
        if self.smallest is None or size(workload) <= size(self.smallest[0]):
            self.smallest = (workload, d)
        self.last_failing = (workload, d)
        raise ProbeDiverged(f"probe {d['what']} differs at step {d['step']}")


def _settings(budget: Budget, database: Path | None) -> settings:
    return settings(max_examples=budget.examples, deadline=None, derandomize=False,
                    database=DirectoryBasedExampleDatabase(str(database)) if database else None,
                    phases=(Phase.reuse, Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck),
                    verbosity=Verbosity.quiet, print_blob=False, report_multiple_bugs=False)  # fmt: skip


def fuzz(url: str, space: Space, budget: Budget, seed: int, *, headers: dict | None = None,
         database: Path | None = None, label: str = "target") -> Result:  # fmt: skip
    """Search for a workload that changes the probe; shrink it; confirm it (see the module doc)."""
    s = _Search(url.rstrip("/"), space, budget, dict(headers or {}), label)
    r = s.result
    probe_only = {"probe": {"route": "/v1/completions", "body": space.probe_body()}, "neighbours": []}
    try:
        t0 = time.monotonic()
        r.alone = s.send(probe_only)["probe"]
        again = s.send(probe_only)["probe"]
    except _Stop:
        r.stopped, r.wall_s = "error", time.monotonic() - s.start
        return r
    if (d := wire.difference(r.alone, again)) is not None:
        r.nondeterminism = f"the probe alone differed between two runs ({d['what']} at step {d['step']})"
        r.alone_unstable = True
        r.stopped, r.wall_s = "probe alone unstable", time.monotonic() - s.start
        return r
    r.space = s.space = space = replace(space, probe_ms=max((time.monotonic() - t0) * 500.0, 1.0))
    test = hypothesis_seed(seed)(_settings(budget, database)(given(workloads(space))(s.prop)))
    try:
        test()
        r.stopped = r.stopped or "example budget"
    except _Stop:
        r.stopped = r.stopped or "error"
    except Flaky:
        # hypothesis could not replay a failure: the smallest workload seen failing twice, confirmed below
        r.workload, r.difference = s.smallest or (r.first["workload"], r.first["difference"])
        r.stopped, r.shrunk = "failure found; hypothesis's replay was flaky, so shrinking stopped early", False
        r.shrink_s = time.monotonic() - (s.found_at or s.start)
    except ProbeDiverged:
        r.workload, r.difference = s.last_failing
        r.stopped = "failure found and shrunk"
        r.shrink_s = time.monotonic() - (s.found_at or s.start)
    if r.workload is not None and r.error is None:
        _confirm(s)
    if r.workload is None and r.nondeterminism is None and r.unreplayed:
        r.nondeterminism = (f"{r.unreplayed} workload(s) changed the probe once and not when sent again at once "
                            "(the same workload gave different probe answers)")  # fmt: skip
        r.first = r.first or r.unreplayed_first
    r.wall_s = time.monotonic() - s.start
    s.progress(force=True)
    return r


def _confirm(s: _Search) -> None:
    """The failing workload and the probe alone, each ``confirm_runs`` times, interleaved. The probe
    alone changing, or the workload never reproducing, is run-to-run nondeterminism; the workload
    reproducing with different bits from run to run is a workload-triggered divergence that is
    also nondeterministic (``variants`` > 1), reported as such."""
    r = s.result
    hits, alone_changed, variants = 0, 0, {json.dumps(r.difference, sort_keys=True)}
    probe_only = {"probe": r.workload["probe"], "neighbours": []}
    try:
        for _ in range(s.budget.confirm_runs):
            d = wire.difference(r.alone, s.send(r.workload)["probe"])
            if d is not None:
                hits += 1
                variants.add(json.dumps(d, sort_keys=True))
            alone_changed += wire.difference(r.alone, s.send(probe_only)["probe"]) is not None
    except _Stop:
        return
    r.confirm = {"runs": s.budget.confirm_runs, "reproduced": hits, "alone_changed": alone_changed,
                 "distinct_differences": len(variants)}  # fmt: skip
    if alone_changed:
        r.nondeterminism = f"the probe alone changed in {alone_changed}/{s.budget.confirm_runs} confirmation runs"
        r.alone_unstable = True
    elif hits == 0:
        r.nondeterminism = (f"the failing workload did not reproduce in {s.budget.confirm_runs} confirmation runs "
                            "(the same workload gave different probe answers)")  # fmt: skip
    if r.nondeterminism is not None:
        r.workload = None  # never hand out a workload that does not reproduce as the cause
    r.replay_variants = len(variants)
