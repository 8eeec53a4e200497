"""Targets for the e2e suites.

``target``: the engine under test, expected invariant: ``--invariance-url`` with the adapter of
``--invariance-engine`` (default ``openai``), else the bundled engine started here in invariant mode.
``control_target``: the positive control with invariance off: ``--invariance-url-control``, else the
bundled engine started here in default mode. Both are session-scoped (one engine per worker;
run with ``-n N --dist loadgroup`` so that all e2e tests share one worker). An
unreachable URL fails every test at once with one line; a missing fastapi/uvicorn skips.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_invariance.adapters import AdapterError, make_adapter
from pytest_invariance.e2e import Target
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


def _connect(config: pytest.Config, url: str, engine: str, role: str, expected: str) -> Target:
    adapter = make_adapter(engine, url, retries=2, **adapter_options(config))
    try:
        adapter.get("/v1/models" if engine != "sglang" else "/model_info", timeout_s=15)
    except AdapterError as exc:
        if exc.field in ("connection", "timeout", "deadline", "url", "transport"):
            flag = "--invariance-url" if role == "target" else "--invariance-url-control"
            pytest.fail(f"{flag} {url} is unreachable: {exc}", pytrace=False)
    t = Target(adapter, role, expected, dispatch=_dispatch(config))
    t.refresh()
    return t


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
        pytest.skip(f"e2e suites need the bundled engine: {exc}")
    request.addfinalizer(eng.stop)
    t = Target(adapter, role, expected, log_path=str(eng.log_path), dispatch=_dispatch(request.config))
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
