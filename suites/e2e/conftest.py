"""Targets for the e2e suites.

``target``: the engine under test, expected invariant: ``--invariance-url`` with the adapter of
``--invariance-engine`` (default ``openai``), else the bundled engine started here in invariant mode.
``control_target``: the positive control with invariance off: ``--invariance-url-control``, else the
bundled engine started here in default mode. Both are session-scoped (one engine per worker;
run with ``-n N --dist loadgroup`` so that all e2e tests share one worker). An
unreachable URL aborts the session at once with one line (nothing else would be worth running
against it); a missing fastapi/uvicorn fails the e2e tests with the install line, never a silent
skip that reads as a pass in CI (deselect suites/e2e to run without the engine extra).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_invariance.adapters import Adapter, AdapterError, make_adapter
from pytest_invariance.e2e import Target
from pytest_invariance.e2e.target import REAL_PROBE_TOKENS, SweepOptions, detect_evidence, name_target
from pytest_invariance.plugin import adapter_options, option

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers this marker itself; runs without it (the demo) need it known too.
    config.addinivalue_line("markers", "xdist_group(name): run every test of the group on one xdist worker")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder is ``e2e``, and all of them share one xdist group.

    An invariance test and its inverse test reuse one control sweep; in one group (with
    ``--dist loadgroup``) they run on one worker against one pair of engines, so serial
    and parallel runs pair the same outcomes, and the engines start once.
    """
    for item in items:
        if Path(str(item.path)).resolve().parent == HERE:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.xdist_group("invariance-e2e"))




def _dispatch(config: pytest.Config) -> str:
    value = option(config, "invariance_dispatch") or "list"
    if value not in ("list", "independent"):
        raise pytest.UsageError(f"invariance_dispatch must be list or independent, got {value!r}")
    return value


_OPTIONS: dict[int, SweepOptions] = {}


def _lengths(config: pytest.Config, name: str) -> tuple[int, ...] | None:
    text = option(config, name)
    if text is None:
        return None
    try:
        values = tuple(int(x) for x in str(text).replace(" ", "").split(",") if x)
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise pytest.UsageError(f"{name}: expected positive integers separated by commas, got {text!r}")
    return values


def _replays(config: pytest.Config) -> int:
    value = option(config, "invariance_replays")
    try:
        return int(value) if value is not None else 5
    except ValueError:
        raise pytest.UsageError(f"invariance_replays: expected an integer >= 2, got {value!r}") from None


def sweep_options(config: pytest.Config, adapter: Adapter | None = None) -> SweepOptions:
    """One :class:`SweepOptions` per session, so a target and its control send and compare alike.

    Defaults: a ``--invariance-url`` target gets a 129-token probe (one 128-token block + 1, see
    ``REAL_PROBE_TOKENS``); the bundled engine alone keeps the short text probe. ``auto`` prompts are text for the
    plain ``openai`` flavour (servers such as ``transformers serve`` refuse token ids), ids elsewhere;
    ``auto`` evidence asks the first live server once whether it returns logprobs and token ids."""
    if id(config) in _OPTIONS:
        return _OPTIONS[id(config)]
    url = option(config, "invariance_url") or config.getoption("invariance_url_control")
    engine = option(config, "invariance_engine") or ("openai" if url else "bundled")
    probe = option(config, "invariance_probe_tokens")
    try:
        probe = int(probe) if probe is not None else (REAL_PROBE_TOKENS if url else None)
    except ValueError:
        raise pytest.UsageError(f"invariance_probe_tokens: expected a positive integer, got {probe!r}") from None
    prompts = option(config, "invariance_prompts") or "auto"
    if prompts == "auto":
        prompts = "text" if engine == "openai" else "ids"
    evidence = option(config, "invariance_evidence") or "auto"
    if evidence == "auto":
        evidence = "logprobs"
        if engine == "openai" and adapter is not None:
            try:
                evidence = detect_evidence(adapter)
            except AdapterError as exc:
                pytest.fail(f"{adapter.base_url}: cannot tell what the server returns: {exc}", pytrace=False)
    try:
        opts = SweepOptions(probe_tokens=probe, neighbour_tokens=_lengths(config, "invariance_neighbour_tokens"),
                            prefix_lengths=_lengths(config, "invariance_prefix_lengths"),
                            levels=_lengths(config, "invariance_levels"), prompts=prompts,
                            evidence=evidence, replays=_replays(config))  # fmt: skip
    except ValueError as exc:
        raise pytest.UsageError(f"e2e sweep options: {exc}") from None
    _OPTIONS[id(config)] = opts
    return opts


def _connect(config: pytest.Config, url: str, engine: str, role: str, expected: str) -> Target:
    adapter = make_adapter(engine, url, retries=2, **adapter_options(config))
    try:
        adapter.get("/v1/models" if engine != "sglang" else "/model_info", timeout_s=15)
    except AdapterError as exc:
        if exc.field in ("connection", "timeout", "deadline", "url", "transport"):
            flag = "--invariance-url" if role == "target" else "--invariance-url-control"
            pytest.exit(f"{flag} {url} is unreachable: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    t = Target(adapter, role, expected, dispatch=_dispatch(config), options=sweep_options(config, adapter))
    t.refresh()
    _name_target(config, t)
    return t


def _name_target(config: pytest.Config, t: Target) -> None:
    """``--invariance-implementation`` / ``--invariance-target-version`` / ``--invariance-target-mode``."""
    name_target(
        t,
        option(config, "invariance_implementation"),
        option(config, "invariance_target_version"),
        option(config, "invariance_target_mode"),
    )


def _start(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    invariant: bool,
    *args: str,
    role: str | None = None,
) -> Target:
    from pytest_invariance.adapters.bundled import BundledEngine, EngineUnavailable

    expected = "invariant" if invariant else "default"
    role = role or ("target" if invariant else "control")
    eng = BundledEngine(invariant=invariant, extra_args=list(args), log_dir=tmp_path_factory.mktemp("engine"))
    try:
        adapter = eng.start()
    except EngineUnavailable as exc:
        pytest.fail(f"e2e suites need the bundled engine: {exc}; install it with: pip install "
                    "'pytest-invariance[engine]' (or deselect suites/e2e)", pytrace=False)
    request.addfinalizer(eng.stop)
    for name, value in adapter_options(request.config).items():  # the request timeout and deadline apply here too
        if name in ("timeout_s", "deadline_s"):
            setattr(adapter, name, value)
    t = Target(adapter, role, expected, log_path=str(eng.log_path), dispatch=_dispatch(request.config),
               options=sweep_options(request.config), started_here=True)  # fmt: skip
    t.refresh()
    return t


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Target:
    url = option(request.config, "invariance_url")
    if url:
        engine = option(request.config, "invariance_engine") or "openai"
        return _connect(request.config, url, engine, "target", "invariant")
    return _start(request, tmp_path_factory, invariant=True)


@pytest.fixture(scope="session")
def control_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Target:
    url = request.config.getoption("invariance_url_control")
    if url:
        engine = option(request.config, "invariance_engine") or "openai"
        return _connect(request.config, url, engine, "control", "default")
    return _start(request, tmp_path_factory, invariant=False)


@pytest.fixture(scope="session")
def shared_rng_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Target:
    """The bundled engine in invariant mode but sampling from one engine-wide RNG: the positive
    control of seeded sampling whose only batch dependence is the sampler's (started on demand)."""
    info = request.getfixturevalue("target").info or {}
    args = ["--shared-rng"]  # on the bundled target's device and preset, so its record's hardware is true
    if info.get("device"):
        args += ["--device", str(info["device"]).split(":")[0]]
    from pytest_invariance.engine.config import preset_for_model_name

    preset = preset_for_model_name(info.get("served_model_name"))
    if preset:
        args += ["--preset", preset]
    return _start(request, tmp_path_factory, True, *args, role="control")


@pytest.fixture(scope="session")
def replay_control_target(request: pytest.FixtureRequest) -> Target:
    """The replay check's positive control: the planted-bug ``replay`` fake (a reduction whose
    order is a race, in steps shared by two or more requests), served here on a loopback thread.
    No engine with invariance off is nondeterministic run to run by design, so this is the control
    for every target, the bundled engine and a URL alike (its record says so)."""
    from pytest_invariance.fakes import FakeEngine

    fake = FakeEngine("replay", replay_rate=0.3).start()
    request.addfinalizer(fake.stop)
    adapter = make_adapter("vllm", fake.url, retries=2)
    t = Target(adapter, "control", "invariant", dispatch=_dispatch(request.config), options=sweep_options(request.config),
               control_note=f"planted-bug fake engine 'replay' at {fake.url} (pytest_invariance.fakes): it proves the "
                            "workload co-runs requests and the comparison sees a changed bit, not that the "
                            "target's own kernels would")  # fmt: skip
    t.refresh()
    t.info = {**(t.info or {}), "implementation": "fake-replay"}  # its records and labels say what it is
    return t


# The prefix cache lets identical prompts skip most of their prefill, which removes the batch mixing
# the other sweeps rely on; so the bundled engines started here run without it, and the cache
# suite gets its own pair with ``--prefix-cache`` (started only when that suite runs).
@pytest.fixture(scope="session")
def cache_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Target:
    if option(request.config, "invariance_url"):
        return request.getfixturevalue("target")
    return _start(request, tmp_path_factory, True, "--prefix-cache")


@pytest.fixture(scope="session")
def cache_control_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Target:
    if request.config.getoption("invariance_url_control"):
        return request.getfixturevalue("control_target")
    return _start(request, tmp_path_factory, False, "--prefix-cache")


# Speculative decoding: the same engine again with prompt-lookup drafts, beside ``target`` and
# ``control_target``: ``--invariance-url-speculative`` / ``-speculative-control`` where those are
# live URLs, else the bundled engine started here (started only when the speculative suite runs).
SPECULATIVE = ("--speculative", "ngram:4")


def _speculative(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, invariant: bool
) -> Target:
    role, flag = ("target", "url_speculative") if invariant else ("control", "url_speculative_control")
    url = request.config.getoption(f"invariance_{flag}")
    if url:
        engine = option(request.config, "invariance_engine") or "openai"
        return _connect(request.config, url, engine, role, "invariant" if invariant else "default")
    if option(request.config, "invariance_url") or request.config.getoption("invariance_url_control"):
        pytest.skip(f"--invariance-{flag.replace('_', '-')} names no speculative twin of the live target")
    return _start(request, tmp_path_factory, invariant, *SPECULATIVE)


@pytest.fixture(scope="session")
def speculative_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Target:
    return _speculative(request, tmp_path_factory, True)


@pytest.fixture(scope="session")
def speculative_control_target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Target:
    return _speculative(request, tmp_path_factory, False)


@pytest.fixture(scope="session")
def fuzz_options(request: pytest.FixtureRequest):
    """The fuzz check's budget (``--invariance-fuzz-examples`` / ``-time``, else by profile) and its
    directory (``--invariance-fuzz-dir``, else ``fuzz/`` under ``--invariance-report``, else
    ``./invariance-fuzz``): example database and reproducers."""
    from pytest_invariance.e2e.fuzzing import options
    from pytest_invariance.plugin import positive_int, positive_seconds

    cfg = request.config
    values = {}
    for name, parse in (("invariance_fuzz_examples", positive_int()), ("invariance_fuzz_time", positive_seconds("invariance_fuzz_time"))):
        raw = option(cfg, name)
        try:
            values[name] = parse(str(raw)) if raw is not None else None
        except Exception as exc:  # noqa: BLE001 - argparse's ArgumentTypeError: one line, the value named
            raise pytest.UsageError(f"{name}: {exc}") from None
    report = option(cfg, "invariance_report")
    directory = option(cfg, "invariance_fuzz_dir") or (str(Path(report) / "fuzz") if report else "invariance-fuzz")
    profile = option(cfg, "invariance_profile") or "quick"
    probe = option(cfg, "invariance_probe_tokens")
    return options(profile, Path(directory), values["invariance_fuzz_examples"], values["invariance_fuzz_time"],
                   int(probe) if probe else None)

