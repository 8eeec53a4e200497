"""The ``invariance`` fixture: run an oracle and its control, record, and judge.

Kept apart from plugin.py so that loading the plugin never imports torch or the judge: this
module is imported only when a test requests the fixture (the plugin reads ``settings`` only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_invariance import hardware
from pytest_invariance.judge import EXPECTS, Control, InvarianceFailure, Observation, failure_message, judge
from pytest_invariance.records import make_record
from pytest_invariance.settings import Settings

__all__ = ["DEFAULT_FAMILY", "EXPECTS", "Invariance", "InvarianceFailure", "Settings", "failure_message"]


DEFAULT_FAMILY = "custom"  # a user's own function, not one of the catalogue's families


@dataclass(repr=False)
class Invariance:
    """Per-test handle. Every check appends its record to ``records``."""

    settings: Settings
    nodeid: str
    records: list[dict] = field(default_factory=list)
    markers: dict = field(default_factory=dict)  # defaults from @family(...) / @quant(...)

    def __repr__(self) -> str:  # pytest prints a failing test's arguments: keep this one line
        return f"<invariance {self.nodeid} profile={self.profile} trials={self.trials} records={len(self.records)}>"

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
        """``cuda`` (this worker's pinned GPU is the current device) or ``cpu``."""
        if hardware.cuda_available():
            self.gpu  # noqa: B018 - pins this worker's GPU as the current device
            return "cuda"
        return "cpu"

    @property
    def gpu(self) -> int | None:
        """The GPU index this worker runs on (``gpus.pinned_gpu``: worker i on GPU i mod count)."""
        from pytest_invariance.gpus import pinned_gpu

        return pinned_gpu()

    def batch_sizes(self, limit: int | None = None) -> list[int]:
        from pytest_invariance.oracles.sweeps import batch_sweep

        return batch_sweep(self.profile, limit if limit is not None else self.settings.limit)

    # -- oracles over row callables -------------------------------------------------
    def batch(self, fn: Callable, inputs: Any, **kw: Any) -> dict:
        """``batch-size`` oracle: the probe row alone vs inside batches of N."""
        __tracebackhide__ = True
        return self.check(fn, inputs, oracle="batch-size", **kw)

    def position(self, fn: Callable, inputs: Any, **kw: Any) -> dict:
        """``batch-position`` oracle: the probe row at positions {0, 1, mid, N-2, N-1}."""
        __tracebackhide__ = True
        return self.check(fn, inputs, oracle="batch-position", **kw)

    def run_to_run(self, fn: Callable, inputs: Any, **kw: Any) -> dict:
        """``run-to-run`` oracle: the same call repeated."""
        __tracebackhide__ = True
        return self.check(fn, inputs, oracle="run-to-run", **kw)

    def chunking(self, run: Callable, chunk_sizes: list[int], **kw: Any) -> dict:
        """``chunking`` oracle: ``run(None)`` whole vs ``run(c)`` chunked (``run`` may take ``seed=``)."""
        __tracebackhide__ = True
        return self.check(run, None, oracle="chunking", chunk_sizes=chunk_sizes, **kw)

    def world_size(self, fn: Callable, inputs: Any, world_sizes: list[int], **kw: Any) -> dict:
        """``world-size`` oracle: ``fn(rows, w)`` at every world size ``w`` vs the smallest (TP1 vs TPn)."""
        __tracebackhide__ = True
        return self.check(fn, inputs, oracle="world-size", world_sizes=world_sizes, **kw)

    def precision(
        self,
        fn: Callable,
        *,
        implementation: str,
        declared: str = "fp32-ieee",
        family: str = "matmul",
        ms: tuple[int, ...] = (16, 64, 1024),
        n: int = 64,
        k: int = 512,
        control: Callable | None = None,
        control_name: str | None = None,
        expect: str = "invariant",
        extra: dict | None = None,
    ) -> dict:
        """``precision`` oracle: which arithmetic ``fn(x[M, K], w[N, K]) -> fp32`` really uses, at
        several M, against the ``declared`` quantization (``fp32-ieee``, ``fp32-tf32``, ...).

        ``divergent`` when the measured class is not the declared one. The control (default: a
        TF32 emulation, inputs rounded to 10 mantissa bits) must be measured as other than the
        declared arithmetic, else the check could not tell and the result is ``vacuous``."""
        __tracebackhide__ = True
        from pytest_invariance.reference_kernels import precision as P

        def measure(f: Callable) -> Observation:
            try:
                res = P.classify_fp32_matmul_sizes(f, self.device, ms=ms, n=n, k=k, seed=self.seed)
            except Exception as exc:  # noqa: BLE001 - a kernel crash is evidence, recorded as incomplete
                return Observation(None, {}, error=f"{type(exc).__name__}: {exc}")
            ev = {**res.to_dict(), "declared": declared, "measured": res.quantization}
            text = (f"precision: measured {res.quantization} (scaled error {res.scaled_error:.2e}; by M "
                    f"{ {m: P.QUANTIZATION[c] for m, c in res.by_m.items()} }), declared {declared}")  # fmt: skip
            return Observation(res.quantization != declared, ev, text)

        if control is None:
            import torch.nn.functional as F

            def tf32_emulation(x: Any, w: Any) -> Any:
                return F.linear(P.round_mantissa(x, 10), P.round_mantissa(w, 10))

            control, control_name = tf32_emulation, control_name or "tf32-emulation"
        ctl = Control(control_name or getattr(control, "__name__", "control"), measure(control))
        return judge(
            self, measure(fn), ctl, expect=expect, family=family, implementation=implementation,
            oracle="precision", quantization=declared, dtype="float32", shape={"M": list(ms), "N": n, "K": k},
            contract=f"bounds {', '.join(f'{c}<={b:.2e}' for c, b in P.BOUNDS.items())}",
            seed=self.seed, trials=1, profile=self.profile, extra=extra,
        )  # fmt: skip

    def localize(
        self,
        model: Any,
        probe: Any,
        neighbours: Any,
        *,
        call: Callable | None = None,
        batch_sizes: list[int] | tuple[int, ...] = (1, 8, 64),
        positions: str | list[int] = "ends",
        control: bool = True,
        control_site: str | None = None,
        implementation: str | None = None,
        expect: str = "invariant",
        extra: dict | None = None,
    ) -> dict:
        """``localize`` oracle: the probe alone vs inside batches, aten op by aten op; a divergence
        fails with the first op that diverged (module path, op, shapes, max ULP, batch sizes).

        The control is the model with its first ``nn.Linear`` (or ``control_site``) planted with
        the split-K mutant: it must name that module, else equality is ``vacuous``."""
        __tracebackhide__ = True
        from pytest_invariance.localize.check import run_check

        res = run_check(model, probe, neighbours, batch_sizes=batch_sizes, positions=positions, call=call,
                        control=control, control_site=control_site)  # fmt: skip
        observed = Observation(res.diverged, res.evidence, res.summary, error=res.error)
        ctl = None
        if res.control is not None:
            ctl = Control(res.control.name, Observation(res.control.diverged, res.control_evidence(), error=res.control.error))
        return judge(
            self, observed, ctl, expect=expect, family="engine",
            implementation=implementation or type(model).__name__, oracle="localize", contract="bitwise",
            seed=self.seed, trials=1, profile=self.profile, extra=extra, **res.subject,
        )  # fmt: skip

    def check(
        self,
        fn: Callable,
        inputs: Any,
        *,
        oracle: str,
        family: str | None = None,
        implementation: str | None = None,
        quantization: str | None = None,
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
        world_sizes: list[int] | None = None,
    ) -> dict:
        """Run ``oracle`` on ``fn`` (and on ``control``), then :func:`judge` records and enforces.

        ``family`` defaults to the test's ``@pytest.mark.family`` or ``custom``, ``implementation`` to
        ``fn``'s name, ``quantization`` and ``dtype`` to those of the input rows."""
        __tracebackhide__ = True
        from pytest_invariance.oracles.vocabulary import quantization_of

        if expect not in EXPECTS:
            raise ValueError(f"expect={expect!r}; expected one of {', '.join(EXPECTS)}")
        n_trials = trials or self.settings.trials
        sizes = list(batch_sizes) if batch_sizes is not None else self.batch_sizes(limit)
        run = _OracleRun(oracle, contract, sizes, chunk_sizes, repeats or self.settings.repeats,
                         world_sizes=world_sizes)
        result, error = run.trials(fn, inputs, self.settings.seed, n_trials)
        observed = Observation(result.diverged, result.evidence(), result.describe(), error=error)
        dtype = dtype if dtype is not None else run.dtype
        if quantization is None:
            quantization = self.markers.get("quant") or (quantization_of(dtype) if dtype is not None else "unknown")
        family = family or self.markers.get("family") or DEFAULT_FAMILY
        implementation = implementation or getattr(fn, "__name__", None) or "custom"
        ctl = None
        if control is not None:
            cres, cerr = run.trials(control, inputs, self.settings.seed, n_trials)
            name = control_name or getattr(control, "__name__", "control")
            ctl = Control(name, Observation(cres.diverged, cres.evidence(), cres.describe(), error=cerr))
        return judge(
            self, observed, ctl, expect=expect,
            family=family, implementation=implementation, oracle=oracle, quantization=quantization,
            dtype=dtype, shape=shape, mode=mode, contract=result.contract, cost=cost,
            seed=self.settings.seed, trials=n_trials, profile=self.profile,
            extra={**(extra or {}), "batch_sizes": sizes if oracle in ("batch-size", "batch-position") else None,
                   **({"world_sizes": sorted(world_sizes)} if world_sizes else {})},
        )  # fmt: skip

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


@dataclass
class _OracleRun:
    oracle: str
    contract: str
    batch_sizes: list[int]
    chunk_sizes: list[int] | None
    repeats: int
    dtype: Any = None  # of the first trial's rows: the record's default dtype and quantization
    world_sizes: list[int] | None = None

    def trials(self, fn: Callable, inputs: Any, seed: int, n: int):
        """Run ``n`` trials with fresh inputs per trial; an exception marks the result incomplete."""
        from pytest_invariance.oracles import batch as B

        result = B.OracleResult(self.oracle, str(B.parse_contract(self.contract)))
        error = None
        try:
            for t in range(n):
                rows = inputs(seed + t) if callable(inputs) else inputs
                if self.dtype is None:
                    self.dtype = getattr(rows, "dtype", None)
                runner = ORACLE_RUNNERS.get(self.oracle)
                if runner is None:
                    raise ValueError(f"unknown oracle {self.oracle!r}; expected one of {', '.join(ORACLE_RUNNERS)}")
                runner(self, fn, rows, seed + t, t, result)
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


POSITION_SIZES = 8  # the position oracle calls fn 5 times per size: 40 calls at most per trial


def position_sizes(sizes: list[int]) -> list[int]:
    """Batch sizes for the position oracle: every sweep size >= 3 when there are at most
    ``POSITION_SIZES``, else that many spread evenly over them (the smallest and largest included)."""
    big = sorted({s for s in sizes if s >= 3})
    if not big:
        return sorted({s for s in sizes if s >= 2})
    if len(big) <= POSITION_SIZES:
        return big
    step = (len(big) - 1) / (POSITION_SIZES - 1)
    return sorted({big[round(i * step)] for i in range(POSITION_SIZES)})


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


def _nondeterministic(run: _OracleRun, fn: Callable, rows: Any, trial: int, result: Any) -> bool:
    """Run-to-run on the largest batch first; once seen, the batch oracles are not run at all (the
    trial that saw it counts as a failed trial, the trials after it are not counted: failures/N
    then speaks of the trials that ran)."""
    from pytest_invariance.oracles import batch as B

    if result.nondeterministic:
        return True
    n = min(max(run.batch_sizes), rows.shape[0])
    if not B.nondeterminism_precheck(fn, rows, n, contract=run.contract, trial=trial, result=result):
        return False
    result.trials += 1  # the trial that saw it ran and failed: counted, so failures never exceed trials
    return True


def _batch_size(run: _OracleRun, fn: Callable, rows: Any, seed: int, trial: int, result: Any) -> None:
    from pytest_invariance.oracles import batch as B

    if not _nondeterministic(run, fn, rows, trial, result):
        B.batch_size_oracle(fn, rows, run.batch_sizes, contract=run.contract, trial=trial, result=result)


def _batch_position(run: _OracleRun, fn: Callable, rows: Any, seed: int, trial: int, result: Any) -> None:
    from pytest_invariance.oracles import batch as B

    if not _nondeterministic(run, fn, rows, trial, result):
        B.batch_position_oracle(fn, rows, position_sizes(run.batch_sizes), contract=run.contract, trial=trial,
                                result=result)  # fmt: skip


def _run_to_run(run: _OracleRun, fn: Callable, rows: Any, seed: int, trial: int, result: Any) -> None:
    from pytest_invariance.oracles import batch as B

    B.run_to_run_oracle(fn, rows, run.repeats, contract=run.contract, trial=trial, result=result)


def _chunking(run: _OracleRun, fn: Callable, rows: Any, seed: int, trial: int, result: Any) -> None:
    from pytest_invariance.oracles import batch as B

    if not run.chunk_sizes:
        raise ValueError("chunking oracle needs chunk_sizes")
    B.chunking_oracle(_seeded(fn, seed), run.chunk_sizes, contract=run.contract, trial=trial, result=result)


def _world_size(run: _OracleRun, fn: Callable, rows: Any, seed: int, trial: int, result: Any) -> None:
    from pytest_invariance.oracles.world import world_size_oracle

    if not run.world_sizes:
        raise ValueError("world-size oracle needs world_sizes")
    world_size_oracle(fn, rows, run.world_sizes, contract=run.contract, trial=trial, result=result)


# The one name -> oracle table (names from oracles.vocabulary).
ORACLE_RUNNERS: dict[str, Callable[..., None]] = {
    "batch-size": _batch_size,
    "batch-position": _batch_position,
    "run-to-run": _run_to_run,
    "chunking": _chunking,
    "world-size": _world_size,
}
