"""pytest plugin entry point: options, markers, fixtures and the record flow.

Thin on purpose (PYTEST_DONT_REWRITE): hooks only; torch, pandas and the
oracles are imported inside fixtures and hooks, so installing the plugin costs
nothing in test runs that never use it. Records ride on test reports, so they
cross pytest-xdist; only the controller writes files.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

from .engine.argtypes import positive_int, positive_seconds  # argparse only: no torch, no FastAPI
from .oracles.vocabulary import ENGINES, PROFILES

RECORDS_ATTR = "invariance_records"


MARKERS = (
    "gpu: needs a CUDA GPU; skipped with a reason where CUDA is absent",
    "e2e: end-to-end sweep against a live engine over HTTP",
    "inverse: with invariance off the same sweep must observe divergence",
    "perf: benchmark; records time relative to the stock kernel",
    "family(name): kernel family under test (matmul, rmsnorm, softmax, attention-prefill, ...)",
    "quant(name): quantization under test (bf16, fp16, fp32-ieee, fp8-e4m3-token, ...)",
)


_positive_int = positive_int()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Options and ini keys: ``pytest_invariance.options``."""
    from .options import add_options

    add_options(parser)


def option(config: pytest.Config, name: str) -> Any:
    """``--name`` from the command line, else the ini key of the same name (where one exists), else None."""
    value = config.getoption(name)
    if value is None:
        try:
            value = config.getini(name) or None
        except ValueError:  # no ini key of that name
            return None
    return value




def adapter_options(config: pytest.Config) -> dict[str, Any]:
    """Keyword arguments for ``make_adapter`` from the request options and ini keys (a bad value is
    a one-line usage error, raised at configure time)."""
    kw: dict[str, Any] = {}
    for name, key in (("invariance_request_timeout", "timeout_s"), ("invariance_request_deadline", "deadline_s")):
        value = option(config, name)
        if value is not None:
            try:
                kw[key] = positive_seconds(name)(str(value))
            except argparse.ArgumentTypeError as exc:
                raise pytest.UsageError(str(exc)) from None
    for name, key in (("invariance_api_key", "api_key"), ("invariance_model", "model")):
        value = option(config, name)
        if value:
            kw[key] = str(value)
    return kw


def check_url(name: str, url: str | None) -> None:
    """A one-line usage error for a URL no request could be sent to (scheme and host are needed)."""
    if not url:
        return
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise pytest.UsageError(f"{name}: not a usable URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise pytest.UsageError(f"{name}: not a usable URL {url!r}: expected http://HOST[:PORT]")


class InvarianceSession:
    """Run-wide state, on the controller (and, for settings, on each worker)."""

    def __init__(self, config: pytest.Config) -> None:
        from pytest_invariance.records import new_run_id
        from pytest_invariance.settings import Settings

        self.config = config
        workerinput = getattr(config, "workerinput", None)
        self.is_worker = workerinput is not None
        run_id = workerinput.get("invariance_run_id") if workerinput else None
        profile = option(config, "invariance_profile") or "quick"
        if profile not in PROFILES:
            raise pytest.UsageError(f"invariance_profile: unknown profile {profile!r} (choose from {', '.join(PROFILES)})")
        trials = option(config, "invariance_trials") or 3
        try:
            trials = _positive_int(str(trials))
        except argparse.ArgumentTypeError as exc:
            raise pytest.UsageError(f"invariance_trials: {exc}") from None
        limit = option(config, "invariance_limit")
        if limit is not None:
            try:
                limit = _positive_int(str(limit))
            except argparse.ArgumentTypeError as exc:
                raise pytest.UsageError(f"invariance_limit: {exc}") from None
        seed = option(config, "invariance_seed") or 0
        try:
            seed = int(str(seed))
        except ValueError:
            raise pytest.UsageError(f"invariance_seed: expected an integer, got {seed!r}") from None
        engine = option(config, "invariance_engine")
        if engine is not None and engine not in ENGINES:
            raise pytest.UsageError(f"invariance_engine: unknown engine {engine!r} (choose from {', '.join(ENGINES)})")
        self.settings = Settings(
            run_id=run_id or new_run_id(),
            profile=profile,
            trials=trials,
            seed=seed,
            limit=limit,
        )
        self.adapter_options = adapter_options(config)
        from pytest_invariance import gpus

        gpu_list = option(config, "invariance_gpus")
        try:
            gpus.configure(gpus.parse_gpus(gpu_list) if gpu_list else None)
        except gpus.GpuChoiceError as exc:
            raise pytest.UsageError(str(exc)) from None
        check_url("--invariance-url", option(config, "invariance_url"))
        check_url("--invariance-url-control", config.getoption("invariance_url_control"))
        check_url("--invariance-url-speculative", config.getoption("invariance_url_speculative"))
        check_url("--invariance-url-speculative-control", config.getoption("invariance_url_speculative_control"))
        self.records_path = option(config, "invariance_records")
        self.report_dir = option(config, "invariance_report")
        self.expect_path = option(config, "invariance_expect")
        self.power = None if self.is_worker else _power_session(config, self.settings)
        self.records: list[dict] = []
        self.regressions: list[str] = []
        self.rendered: dict = {}
        self.problems: list[str] = []
        self.write_failed = False
        if not self.is_worker:
            self._check_paths()

    def _check_paths(self) -> None:
        if self.expect_path:
            if not Path(self.expect_path).is_file():
                raise pytest.UsageError(f"--invariance-expect: no such file: {self.expect_path}")
            from pytest_invariance.expect import ExpectedMatrixError, load_expected

            try:
                load_expected(self.expect_path)
            except ExpectedMatrixError as exc:
                raise pytest.UsageError(f"--invariance-expect: {exc}") from None
        if self.records_path:
            if Path(self.records_path).is_dir():
                raise pytest.UsageError(f"--invariance-records: {self.records_path} is a directory, not a file")
            parent = Path(self.records_path).resolve().parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise pytest.UsageError(f"--invariance-records: cannot create {parent}: {exc.strerror}") from None
            if not os.access(parent, os.W_OK):
                raise pytest.UsageError(f"--invariance-records: directory not writable: {parent}")

    # -- hooks (this object is registered as a plugin) --------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Controller: keep the records a report carries and append them to the JSONL at once,
        so an interrupted run keeps everything recorded before the interruption."""
        records = getattr(report, RECORDS_ATTR, None)
        if self.is_worker or not records:
            return
        if self.power is not None:
            for rec in records:  # before the JSONL append: a record carries the power it was reached with
                self.power.attach(rec)
        self.records.extend(records)
        if self.records_path and not self.write_failed:
            from pytest_invariance.recordio import append_records

            try:
                append_records(self.records_path, records)
            except OSError as exc:  # disk full, path replaced by a directory: say so once, keep running
                self.write_failed = True
                self.problems.append(f"cannot append to {self.records_path}: {exc.strerror or exc}; "
                                     "later records are kept in memory only")  # fmt: skip

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            return
        if self.report_dir and (self.records or self.records_path):
            from pytest_invariance.matrix import render_matrix
            from pytest_invariance.recordio import read_records

            records = self.records
            if self.records_path and Path(self.records_path).is_file() and not self.write_failed:
                records, problems = read_records([self.records_path])
                self.problems = [str(p) for p in problems]
            if records:
                self.rendered = render_matrix(records, self.report_dir)
        if self.write_failed and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.expect_path:
            from pytest_invariance.expect import compare_with_expected

            self.regressions = [str(r) for r in compare_with_expected(self.records, self.expect_path)]
            if self.regressions and session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.is_worker or not self.records:
            return
        from pytest_invariance.summary import summary_lines

        terminalreporter.write_sep("=", "invariance summary")
        for line in summary_lines(self.records):
            terminalreporter.write_line(line)
        for line in self.power.lines(self.records) if self.power is not None else ():
            terminalreporter.write_line(line)
        if self.records_path and not self.write_failed:
            terminalreporter.write_line(f"records appended to {self.records_path}")
        for problem in self.problems:
            terminalreporter.write_line(f"records file: {problem}", yellow=True)
        for path in self.rendered.values():
            terminalreporter.write_line(f"matrix: {path}")
        for reg in self.regressions:
            terminalreporter.write_line(f"REGRESSION: {reg}", red=True)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None  # the suite that reads it refuses it with its own usage error


def _power_session(config: pytest.Config, settings: Any) -> Any:
    """The controller's power state: the session's configuration as the zoo sees it, and the mode
    (``--invariance-power``, else ini ``invariance_power``, else ``$PYTEST_INVARIANCE_POWER``, else auto)."""
    from pytest_invariance.power.config import PowerConfig
    from pytest_invariance.power.session import MODES, PowerSession

    mode = option(config, "invariance_power") or os.environ.get("PYTEST_INVARIANCE_POWER") or "auto"
    if mode not in MODES:
        raise pytest.UsageError(f"invariance_power: expected one of {', '.join(MODES)}, got {mode!r}")
    levels = option(config, "invariance_levels")
    try:
        levels = tuple(int(x) for x in str(levels).replace(" ", "").split(",") if x) if levels else None
    except ValueError:
        levels = None  # the e2e suites refuse it with their own usage error
    cfg = PowerConfig(profile=settings.profile, trials=settings.trials, limit=settings.limit, seed=settings.seed,
                      repeats=settings.repeats, levels=levels, dispatch=option(config, "invariance_dispatch") or "list",
                      replays=_int_or_none(option(config, "invariance_replays")))
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    say = (lambda line: reporter.write_line(line)) if reporter is not None else None
    return PowerSession(cfg, mode, progress=say)


_SESSION = pytest.StashKey[InvarianceSession]()


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    state = InvarianceSession(config)
    config.stash[_SESSION] = state
    config.pluginmanager.register(state, "invariance-session")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(), "invariance-xdist")
    from pytest_invariance.adapters import progress

    progress.install(progress.pytest_sink(config))  # sweeps' progress lines reach the terminal live


def pytest_unconfigure(config: pytest.Config) -> None:
    from pytest_invariance.adapters import progress

    progress.install(None)


class _XdistHooks:
    """Registered only where pytest-xdist is loaded: hands the run id to workers."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput["invariance_run_id"] = node.config.stash[_SESSION].settings.run_id


def pytest_report_header(config: pytest.Config) -> str:
    from pytest_invariance import hardware

    s = config.stash[_SESSION]
    return f"{hardware.header_line()} | profile {s.settings.profile}, trials {s.settings.trials}, run {s.settings.run_id}"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None:
        from pytest_invariance import hardware

        if not hardware.cuda_available():
            pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False on this machine)")
        from pytest_invariance.gpus import GpuChoiceError, pinned_gpu

        try:
            pinned_gpu()  # this worker's own GPU becomes the current device before the test runs
        except GpuChoiceError as exc:
            pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def invariance(request: pytest.FixtureRequest):
    """Run invariance oracles for this test; records attach to the test's report."""
    from pytest_invariance.fixture import Invariance

    session = request.config.stash[_SESSION]
    markers = {}
    for name in ("family", "quant"):
        m = request.node.get_closest_marker(name)
        if m is not None and m.args:
            markers[name] = m.args[0]
    handle = Invariance(session.settings, request.node.nodeid, markers=markers)
    request.node.stash[_RECORDS] = handle.records
    return handle


@pytest.fixture(scope="session")
def hardware() -> dict:
    """Fingerprint of this machine: hardware and software versions."""
    from pytest_invariance import hardware as hw

    return hw.fingerprint()


_RECORDS = pytest.StashKey[list]()
_CALL_SECONDS = pytest.StashKey[float]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.when == "call":
        item.stash[_CALL_SECONDS] = report.duration
    elif call.when == "teardown":
        records = item.stash.get(_RECORDS, None)
        if records:
            seconds = item.stash.get(_CALL_SECONDS, None)
            for rec in records:  # what the check cost, for planning sweeps; shared by a test's records
                if seconds is not None and isinstance(rec.get("extra"), dict):
                    rec["extra"].setdefault("test_seconds", round(seconds, 3))
            setattr(report, RECORDS_ATTR, list(records))
    return report


