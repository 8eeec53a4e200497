"""``pytest-invariance fuzz URL``: the e2e fuzz check from the command line, without pytest.

The target at URL is fuzzed over the budget; the positive control (``--control``: the bundled
engine in default mode, started here, by default; another URL; or ``none``) is fuzzed until its
first failure, shrunk. The verdict is the judge's (``invariant`` only beside a control that
failed). Exit status: 0 invariant, 1 divergent (a workload changed the probe, or run-to-run
nondeterminism), 2 a bad option or an unreachable URL, 3 no clean pass (vacuous or incomplete).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pytest_invariance.oracles.vocabulary import DIVERGENT, ENGINES, INVARIANT

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_NOT_CLEAN = 0, 1, 2, 3


class FuzzUsageError(Exception):
    """A bad value or a target that cannot be used: one line, exit 2."""


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", metavar="URL", help="base URL of an OpenAI-compatible server (http://HOST:PORT)")
    p.add_argument("--engine", choices=ENGINES, default="openai", help="API flavour of URL (default openai)")
    p.add_argument("--control", default="bundled", metavar="URL|bundled|none",
                   help="the positive control: the bundled engine in default mode started here (default), a "
                   "URL with invariance off, or none (then no result is a clean pass)")
    p.add_argument("--examples", type=_positive(int), default=50, metavar="N", help="workloads to generate (default 50)")
    p.add_argument("--time", type=_positive(float), default=300.0, metavar="S",
                   help="wall-clock budget of the search, shrinking apart (default 300)")
    p.add_argument("--shrink-time", type=_positive(float), default=120.0, metavar="S",
                   help="wall-clock budget of shrinking after the first failure (default 120)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="hypothesis's seed (default 0)")
    p.add_argument("--dir", default="invariance-fuzz", metavar="DIR",
                   help="example database and reproducers (default ./invariance-fuzz)")
    p.add_argument("--records", default=None, metavar="PATH", help="append the records to this JSONL file")
    p.add_argument("--probe-tokens", type=_positive(int), default=None, metavar="N",
                   help="probe prompt length (default: the reported KV block + 1)")
    p.add_argument("--prompts", choices=("ids", "text"), default="ids", help="send prompts as token ids or text")
    p.add_argument("--api-key", default=None, metavar="KEY", help="bearer token for URL")
    p.add_argument("--model", default=None, metavar="NAME", help="model name sent (default: the first of /v1/models)")


def _connect(url: str, engine: str, role: str, expected: str, a: argparse.Namespace) -> Any:
    from urllib.parse import urlsplit

    from pytest_invariance.adapters import AdapterError, make_adapter

    from .target import SweepOptions, Target

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise FuzzUsageError(f"{url!r} is not a usable URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FuzzUsageError(f"{url!r} is not a usable URL: expected http://HOST[:PORT]")
    adapter = make_adapter(engine, url, retries=1, api_key=a.api_key, model=a.model)
    try:
        adapter.get("/v1/models", timeout_s=15)
    except AdapterError as exc:
        if exc.field in ("connection", "timeout", "deadline", "url", "transport"):
            raise FuzzUsageError(f"{url} is unreachable: {exc.message}") from None
    t = Target(adapter, role, expected, options=SweepOptions(prompts=a.prompts))
    t.refresh()
    return t


def _control(a: argparse.Namespace, stack: list) -> Any:
    if a.control == "none":
        return None
    if a.control != "bundled":
        return _connect(a.control, a.engine, "control", "default", a)
    from pytest_invariance.adapters.bundled import BundledEngine, EngineUnavailable

    from .target import SweepOptions, Target

    eng = BundledEngine(invariant=False, log_dir=Path(a.dir) / "engine")
    try:
        adapter = eng.start()
    except (EngineUnavailable, RuntimeError) as exc:
        raise FuzzUsageError(f"--control bundled: {exc} (or give --control URL / none)") from None
    stack.append(eng)
    t = Target(adapter, "control", "default", log_path=str(eng.log_path), options=SweepOptions(prompts=a.prompts),
               started_here=True)  # fmt: skip
    t.refresh()
    return t


def _record(target: Any, out: Any, ctl: Any, extra: dict, seed: int) -> dict:
    from pytest_invariance import hardware
    from pytest_invariance.judge import decide
    from pytest_invariance.records import make_record, new_run_id

    from .checks import observation, subject
    from .fuzzing import ORACLE

    fields = subject(SimpleNamespace(seed=seed, profile="cli"), target, ORACLE, out,
                     {**extra, "expect": "invariant", "summary": out.summary})  # fmt: skip
    return make_record(run_id=new_run_id(), fingerprint=hardware.fingerprint(), nodeid="pytest-invariance fuzz",
                       verdict=decide(observation(target, out), ctl),
                       evidence=observation(target, out).evidence,
                       control=ctl.as_record() if ctl is not None else None, **fields)  # fmt: skip


def run(a: argparse.Namespace) -> int:
    """The subcommand's body (``a`` from :func:`add_arguments`); returns the exit status."""
    from .checks import control_of
    from .fuzzing import CONTROL_BUDGET as CB
    from .fuzzing import Budget, FuzzOptions, outcome, record_extra, run_fuzz

    stack: list = []
    try:
        if a.records and Path(a.records).is_dir():
            raise FuzzUsageError(f"--records {a.records}: is a directory, not a file")
        if Path(a.dir).exists() and not Path(a.dir).is_dir():
            raise FuzzUsageError(f"--dir {a.dir}: exists and is not a directory")
        budget = Budget(a.examples, a.time, a.shrink_time)
        opts = FuzzOptions(budget, Budget(CB.examples, min(CB.seconds, a.time), min(CB.shrink_seconds, a.shrink_time)),
                           Path(a.dir), a.probe_tokens)  # fmt: skip
        target = _connect(a.url, a.engine, "target", "invariant", a)
        run_t = run_fuzz(target, opts.target, a.seed, opts)
        out = outcome(run_t)
        print(f"target {target.label}: {out.summary}")
        ctl = None
        if run_t.result.error is None:
            control = _control(a, stack)
            if control is not None:
                ctl_out = outcome(run_fuzz(control, opts.control, a.seed, opts))
                print(f"control {control.label}: {ctl_out.summary}")
                ctl = control_of(target, control, ctl_out)
        rec = _record(target, out, ctl, record_extra(run_t), a.seed)
    except FuzzUsageError as exc:
        print(f"pytest-invariance fuzz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        for eng in stack:
            eng.stop()
    if run_t.reproducer:
        print(f"reproducer: {run_t.reproducer} (python {run_t.reproducer} [URL])")
    if a.records:
        from pytest_invariance.recordio import append_records

        append_records(a.records, [rec])
        print(f"record appended to {a.records}")
    print(f"verdict: {rec['verdict']}")
    return {INVARIANT: EXIT_OK, DIVERGENT: EXIT_FOUND}.get(rec["verdict"], EXIT_NOT_CLEAN)
