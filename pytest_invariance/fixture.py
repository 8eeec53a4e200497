"""The ``invariance`` fixture: run an oracle and its control, record, and judge.

Kept apart from plugin.py so that loading the plugin never imports torch: this
module is imported only when a test requests the fixture.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_invariance import hardware
from pytest_invariance.oracles import verdict as V
from pytest_invariance.records import make_record

EXPECTS = ("invariant", "divergent", "measure")


class InvarianceFailure(AssertionError):
    """A verdict other than the one the test demanded; the message carries the evidence."""


@dataclass
class Settings:
    """Per-session settings the fixture needs (serializable, copied to workers)."""

    run_id: str
    profile: str = "quick"
    trials: int = 3
    seed: int = 0
    repeats: int = 5


@dataclass
class Invariance:
    """Per-test handle. Every check appends its record to ``records``."""

    settings: Settings
    nodeid: str
    records: list[dict] = field(default_factory=list)
    markers: dict = field(default_factory=dict)  # defaults from @family(...) / @quant(...)

    @property
    def profile(self) -> str:
        return self.settings.profile

    @property
    def trials(self) -> int:
        return self.settings.trials

    @property
    def seed(self) -> int:
        return self.settings.seed

    @property
    def device(self) -> str:
        return "cuda" if hardware.cuda_available() else "cpu"

    def batch_sizes(self, limit: int | None = None) -> list[int]:
        from pytest_invariance.oracles.sweeps import batch_sweep

        return batch_sweep(self.profile, limit)

    # -- oracles over row callables -------------------------------------------------
    def batch(self, fn: Callable, inputs: Any, **kw: Any) -> dict:
        """``batch-size`` oracle: the probe row alone vs inside batches of N."""
        return self.check(fn, inputs, oracle="batch-size", **kw)

    def position(self, fn: Callable, inputs: Any, **kw: Any) -> dict:
        """``batch-position`` oracle: the probe row at positions {0, 1, mid, N-2, N-1}."""
        return self.check(fn, inputs, oracle="batch-position", **kw)

    def run_to_run(self, fn: Callable, inputs: Any, **kw: Any) -> dict:
        """``run-to-run`` oracle: the same call repeated."""
        return self.check(fn, inputs, oracle="run-to-run", **kw)

    def chunking(self, run: Callable, chunk_sizes: list[int], **kw: Any) -> dict:
        """``chunking`` oracle: ``run(None)`` whole vs ``run(c)`` chunked (``run`` may take ``seed=``)."""
        return self.check(run, None, oracle="chunking", chunk_sizes=chunk_sizes, **kw)

    def check(
        self,
        fn: Callable,
        inputs: Any,
        *,
        oracle: str,
        family: str,
        implementation: str,
        quantization: str,
        dtype: Any = None,
        shape: Any = None,
        mode: str | None = None,
        control: Callable | None = None,
        control_name: str | None = None,
        expect: str = "invariant",
        contract: str = "bitwise",
        batch_sizes: list[int] | None = None,
        limit: int | None = None,
        chunk_sizes: list[int] | None = None,
        repeats: int | None = None,
        trials: int | None = None,
        cost: dict | None = None,
        extra: dict | None = None,
    ) -> dict:
        """Run ``oracle`` on ``fn`` (and on ``control``), record the verdict, enforce ``expect``."""
        __tracebackhide__ = True
        if expect not in EXPECTS:
            raise ValueError(f"expect={expect!r}; expected one of {', '.join(EXPECTS)}")
        n_trials = trials or self.settings.trials
        sizes = list(batch_sizes) if batch_sizes is not None else self.batch_sizes(limit)
        run = _OracleRun(oracle, contract, sizes, chunk_sizes, repeats or self.settings.repeats)
        result, error = run.trials(fn, inputs, self.settings.seed, n_trials)
        control_rec = None
        control_diverged = None
        if control is not None:
            cres, cerr = run.trials(control, inputs, self.settings.seed, n_trials)
            control_diverged = cres.diverged if cerr is None else None
            control_rec = {
                "name": control_name or getattr(control, "__name__", "control"),
                "diverged": control_diverged,
                "evidence": cres.evidence(),
            }
            if cerr:
                control_rec["error"] = cerr
        verdict = V.decide(result.diverged, control_diverged)
        evidence = result.evidence()
        rec = self.record(
            family=family,
            implementation=implementation,
            oracle=oracle,
            verdict=verdict,
            quantization=quantization,
            dtype=dtype,
            shape=shape,
            mode=mode,
            contract=result.contract,
            evidence=evidence,
            control=control_rec,
            cost=cost,
            seed=self.settings.seed,
            trials=n_trials,
            profile=self.profile,
            extra={
                **(extra or {}),
                "expect": expect,
                "summary": result.describe(),
                "batch_sizes": sizes if oracle in ("batch-size", "batch-position") else None,
            },
        )
        if error is not None:
            raise InvarianceFailure(f"{oracle} on {implementation} could not complete ({verdict}): {error}")
        self.expect_verdict(rec, expect)
        return rec

    # -- records -------------------------------------------------------------------
    def record(self, **fields: Any) -> dict:
        """Attach a prebuilt record (e2e sequences, precision, perf) to this test."""
        fields.setdefault("nodeid", self.nodeid)
        if "family" in self.markers:
            fields.setdefault("family", self.markers["family"])
        if "quant" in self.markers:
            fields.setdefault("quantization", self.markers["quant"])
        rec = make_record(run_id=self.settings.run_id, fingerprint=hardware.fingerprint(), **fields)
        self.records.append(rec)
        return rec

    def expect_verdict(self, rec: dict, expect: str) -> None:
        """Fail the test unless ``rec`` has the demanded verdict (``measure`` never fails)."""
        __tracebackhide__ = True
        if expect == "measure" or rec["verdict"] == expect:
            return
        raise InvarianceFailure(failure_message(rec, expect))


def failure_message(rec: dict, expect: str) -> str:
    """Readable failure: oracle, implementation, where it first differed, max ULP, contract, control."""
    ev = rec.get("evidence") or {}
    summary = (rec.get("extra") or {}).get("summary") or ""
    lines = [
        f"expected {expect}, got {rec['verdict']}: {rec['family']} / {rec['implementation']}"
        f" / {rec.get('quantization')} / oracle {rec['oracle']} [contract {rec['contract']}]",
    ]
    if summary:
        lines.append(f"  {summary}")
    if ev.get("equivalence_classes"):
        lines.append(f"  equivalence classes of batch sizes: {ev['equivalence_classes']}")
    if ev.get("differing_batch_sizes"):
        lines.append(f"  differing batch sizes: {ev['differing_batch_sizes']}")
    ctl = rec.get("control")
    if ctl:
        lines.append(f"  control {ctl['name']}: {'diverged' if ctl.get('diverged') else 'did NOT diverge'}")
    elif rec["verdict"] == V.VACUOUS:
        lines.append("  no positive control was run, so equality cannot count as invariance")
    if rec["verdict"] == V.VACUOUS:
        lines.append("  vacuous: the check could not have seen a divergence on these inputs")
    lines.append(f"  shape {rec.get('shape')}, dtype {rec.get('dtype')}, seed {rec.get('seed')}")
    return "\n".join(lines)


@dataclass
class _OracleRun:
    oracle: str
    contract: str
    batch_sizes: list[int]
    chunk_sizes: list[int] | None
    repeats: int

    def trials(self, fn: Callable, inputs: Any, seed: int, n: int):
        """Run ``n`` trials with fresh inputs per trial; an exception marks the result incomplete."""
        from pytest_invariance.oracles import batch as B

        result = B.OracleResult(self.oracle, str(B.parse_contract(self.contract)))
        error = None
        try:
            for t in range(n):
                rows = inputs(seed + t) if callable(inputs) else inputs
                if self.oracle == B.BATCH_SIZE:
                    B.batch_size_oracle(fn, rows, self.batch_sizes, contract=self.contract, trial=t, result=result)
                elif self.oracle == B.BATCH_POSITION:
                    B.batch_position_oracle(fn, rows, _position_sizes(self.batch_sizes),
                                            contract=self.contract, trial=t, result=result)
                elif self.oracle == B.RUN_TO_RUN:
                    B.run_to_run_oracle(fn, rows, self.repeats, contract=self.contract, trial=t, result=result)
                elif self.oracle == B.CHUNKING:
                    if not self.chunk_sizes:
                        raise ValueError("chunking oracle needs chunk_sizes")
                    run = _seeded(fn, seed + t)
                    B.chunking_oracle(run, self.chunk_sizes, contract=self.contract, trial=t, result=result)
                else:
                    raise ValueError(f"unknown oracle {self.oracle!r}; expected one of {', '.join(B.ORACLES)}")
        except (ValueError, TypeError) as exc:
            if not result.points:
                raise
            error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - a kernel crash is evidence, recorded as incomplete
            if isinstance(exc, pytest.skip.Exception):
                raise
            error = f"{type(exc).__name__}: {exc}"
        result.error = error
        return result, error


def _position_sizes(sizes: list[int]) -> list[int]:
    """A few batch sizes for the position oracle: the smallest >= 3, the median and the largest."""
    big = sorted(s for s in sizes if s >= 3)
    if not big:
        return sorted(s for s in sizes if s >= 2)
    return sorted({big[0], big[len(big) // 2], big[-1]})


def _seeded(run: Callable, seed: int) -> Callable:
    """Give a chunking ``run`` its trial seed when it accepts one."""
    import inspect

    try:
        params = inspect.signature(run).parameters
    except (TypeError, ValueError):
        return run
    if "seed" in params:
        return lambda chunk: run(chunk, seed=seed)
    return run
