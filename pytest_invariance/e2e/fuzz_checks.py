"""The fuzz check judged like every e2e check: the target must keep its probe's bits beside every
workload generated, and the same search on the positive control must find a workload that
changes them (else ``vacuous``). Divergent records carry the shrunk workload (``extra.workload``)
and the path of its standalone reproducer."""

from __future__ import annotations

from typing import Any

from .checks import _judge, control_of
from .fuzzing import ORACLE, FuzzOptions, outcome, record_extra, run_fuzz
from .target import Target


def fuzz_check(invariance: Any, target: Target, control: Target, opts: FuzzOptions) -> dict:
    """Fuzz ``target`` over its budget; then ``control`` until its first failure, shrunk."""
    __tracebackhide__ = True
    run = run_fuzz(target, opts.target, invariance.seed, opts)
    ctl = None
    if run.result.error is None:
        ctl = control_of(target, control, outcome(run_fuzz(control, opts.control, invariance.seed, opts)))
    return _judge(invariance, target, outcome(run), ctl, ORACLE, "invariant", record_extra(run))


def fuzz_inverse_check(invariance: Any, control: Target, opts: FuzzOptions) -> dict:
    """With invariance off the search must find, shrink and confirm a workload that breaks the probe."""
    __tracebackhide__ = True
    run = run_fuzz(control, opts.control, invariance.seed, opts)
    return _judge(invariance, control, outcome(run), None, ORACLE, "divergent",
                  {"inverse": True, **record_extra(run)})  # fmt: skip
