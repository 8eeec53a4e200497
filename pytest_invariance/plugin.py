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
    group = parser.getgroup("invariance", "batch-invariance checks (pytest-invariance)")
    group.addoption("--invariance-url", dest="invariance_url", metavar="URL", default=None,
                    help="base URL of a live engine for the e2e suites (default: start the bundled engine)")
    group.addoption("--invariance-url-control", dest="invariance_url_control", metavar="URL", default=None,
                    help="a target with invariance off, for inverse tests")
    group.addoption("--invariance-url-speculative", dest="invariance_url_speculative", metavar="URL", default=None,
                    help="the --invariance-url engine again with speculative decoding on (the speculative suite)")
    group.addoption("--invariance-url-speculative-control", dest="invariance_url_speculative_control",
                    metavar="URL", default=None,
                    help="the --invariance-url-control engine again with speculative decoding on")
    group.addoption("--invariance-engine", dest="invariance_engine", choices=ENGINES, default=None,
                    help="API flavour of --invariance-url: %(choices)s")
    group.addoption("--invariance-records", dest="invariance_records", metavar="PATH", default=None,
                    help="append every record to this JSONL file (written by the controller only)")
    group.addoption("--invariance-report", dest="invariance_report", metavar="DIR", default=None,
                    help="render matrix.md/.html/.csv/.json into DIR at session end")
    group.addoption("--invariance-trials", dest="invariance_trials", metavar="N", type=_positive_int,
                    default=None, help="trials per check, fresh inputs each (default 3)")
    group.addoption("--invariance-profile", dest="invariance_profile", choices=PROFILES, default=None,
                    help="sweep size: quick (switch points and vLLM/SGLang capture ladders +-1 to 65 rows), "
                    "full (every size to 512, then powers of two +-1 to 8192) or exhaustive (1..limit)")
    group.addoption("--invariance-limit", dest="invariance_limit", metavar="N", type=_positive_int, default=None,
                    help="largest batch swept: caps the profile or extends it by the same rule "
                    "(exhaustive: 1..N, default 512); a suite's own cap for a large shape still applies")
    group.addoption("--invariance-dispatch", dest="invariance_dispatch", choices=("list", "independent"),
                    default=None, help="how e2e sweeps send a batch: list (one request carrying every prompt, "
                    "the default) or independent (one connection per request, staggered arrivals)")
    group.addoption("--invariance-power", dest="invariance_power", action="store_const", const="on", default=None,
                    help="measure this configuration's power over the shipped zoo of planted bugs, the e2e zoo "
                    "too where e2e suites ran, and print the per-class table (ini invariance_power: auto, the "
                    "default, reads the cache and measures the per-op zoo once on a miss; off measures nothing)")
    group.addoption("--invariance-seed", dest="invariance_seed", metavar="N", type=int, default=None,
                    help="base seed of the input generators (default 0)")
    group.addoption("--invariance-expect", dest="invariance_expect", metavar="MATRIX.json", default=None,
                    help="fail the run when a cell that was invariant in MATRIX.json no longer is")
    group.addoption("--invariance-request-timeout", dest="invariance_request_timeout", metavar="S",
                    type=positive_seconds("--invariance-request-timeout"), default=None,
                    help="longest wait for a live engine's next byte (read timeout, default 120 s)")
    group.addoption("--invariance-request-deadline", dest="invariance_request_deadline", metavar="S",
                    type=positive_seconds("--invariance-request-deadline"), default=None,
                    help="wall-clock bound on one request to a live engine, however it trickles "
                    "(default: the read timeout + 10 s + 1 s per token requested)")
    group.addoption("--invariance-api-key", dest="invariance_api_key", metavar="KEY", default=None,
                    help="bearer token sent to --invariance-url and --invariance-url-control")
    group.addoption("--invariance-model", dest="invariance_model", metavar="NAME", default=None,
                    help="model name sent in each request (default: the first of the server's /v1/models)")
    # e2e sweep shape (issue 15): what the sweeps send and compare; defaults depend on the target
    group.addoption("--invariance-probe-tokens", dest="invariance_probe_tokens", metavar="N", type=_positive_int,
                    default=None, help="probe prompt length in tokens for the e2e sweeps (default: 129 for a "
                    "--invariance-url target, the short text probe for the bundled engine)")
    group.addoption("--invariance-neighbour-tokens", dest="invariance_neighbour_tokens", metavar="N,N,...",
                    default=None, help="neighbour prompt lengths in tokens for the needle/mixed/logprobs sweeps")
    group.addoption("--invariance-prefix-lengths", dest="invariance_prefix_lengths", metavar="N,N,...",
                    default=None, help="shared-prefix lengths of the prefix sweep (default: the reported block "
                    "and chunk sizes +-1)")
    group.addoption("--invariance-levels", dest="invariance_levels", metavar="N,N,...", default=None,
                    help="concurrency levels of the single and mixed e2e sweeps (default: powers of two to 16 "
                    "quick, 128 full, plus every capture-ladder edge -1, edge, +1: the target's reported ladder, "
                    "else the vLLM and SGLang defaults)")
    group.addoption("--invariance-replays", dest="invariance_replays", metavar="K", type=_positive_int, default=None,
                    help="replays of the e2e replay check's concurrent workload (default 5; at least 2)")
    group.addoption("--invariance-fuzz-examples", dest="invariance_fuzz_examples", metavar="N", type=_positive_int,
                    default=None, help="workloads the e2e fuzz check generates (default by profile: quick 50, full 200)")
    group.addoption("--invariance-fuzz-time", dest="invariance_fuzz_time", metavar="S",
                    type=positive_seconds("--invariance-fuzz-time"), default=None,
                    help="wall-clock budget of the e2e fuzz search, shrinking apart (default quick 300 s, full 1200 s)")
    group.addoption("--invariance-fuzz-dir", dest="invariance_fuzz_dir", metavar="DIR", default=None,
                    help="where the fuzz check keeps its example database and writes reproducers (default: "
                    "DIR/fuzz of --invariance-report, else ./invariance-fuzz)")
    group.addoption("--invariance-prompts", dest="invariance_prompts", choices=("auto", "ids", "text"),
                    default=None, help="send prompts as token ids or text (auto: text for --invariance-engine "
                    "openai, ids otherwise)")
    group.addoption("--invariance-evidence", dest="invariance_evidence", choices=("auto", "logprobs", "tokens", "text"),
                    default=None, help="what the e2e sweeps compare: token ids and logprob bits, token ids, or "
                    "text (auto: asks the server once whether it returns logprobs and token ids)")
    group.addoption("--invariance-implementation", dest="invariance_implementation", metavar="NAME", default=None,
                    help="name the software behind --invariance-url in records (e.g. transformers-serve), where "
                    "its API flavour (openai) does not")
    group.addoption("--invariance-target-version", dest="invariance_target_version", metavar="V", default=None,
                    help="the target's version for records, where the server reports none")
    group.addoption("--invariance-gpus", dest="invariance_gpus", metavar="I,J,...", default=None,
                    help="GPU indices the xdist workers spread over (worker i takes entry i mod length; "
                    "default: every visible GPU, worker i on GPU i mod count)")
    group.addoption("--invariance-target-mode", dest="invariance_target_mode", choices=("invariant", "default"),
                    default=None, help="the --invariance-url target's mode for records, where the server reports "
                    "none (invariant: it runs under pytest-invariance launch); the control is then default")
    for key in ("fuzz_examples", "fuzz_time", "fuzz_dir"):
        parser.addini(f"invariance_{key}", f"default --invariance-{key.replace('_', '-')}", default=None)
    for key in ("probe_tokens", "neighbour_tokens", "prefix_lengths", "levels", "prompts", "evidence", "implementation",
                "target_version", "gpus", "target_mode"):
        parser.addini(f"invariance_{key}", f"default --invariance-{key.replace('_', '-')}", default=None)
    parser.addini("invariance_url", "default --invariance-url", default=None)
    parser.addini("invariance_request_timeout", "default --invariance-request-timeout (seconds)", default=None)
    parser.addini("invariance_request_deadline", "default --invariance-request-deadline (seconds)", default=None)
    parser.addini("invariance_api_key", "default --invariance-api-key", default=None)
    parser.addini("invariance_model", "default --invariance-model", default=None)
    parser.addini("invariance_engine", "default --invariance-engine", default=None)
    parser.addini("invariance_records", "default --invariance-records", default=None)
    parser.addini("invariance_report", "default --invariance-report", default=None)
    parser.addini("invariance_trials", "default --invariance-trials", default=None)
    parser.addini("invariance_profile", "default --invariance-profile", default=None)
    parser.addini("invariance_limit", "default --invariance-limit", default=None)
    parser.addini("invariance_expect", "default --invariance-expect", default=None)
    parser.addini("invariance_dispatch", "default --invariance-dispatch (list or independent)", default=None)
    parser.addini("invariance_seed", "default --invariance-seed (an integer)", default=None)
    parser.addini("invariance_power", "default --invariance-power (auto, on or off)", default=None)


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


