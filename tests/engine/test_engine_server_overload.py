"""Overload that always answers: under a common descriptor limit a burst of clients each gets an
HTTP status (200, or 503 with Retry-After), never a bare reset; an idle-socket flood on top changes
nothing; an oversized body is a 413 that ``requests``, ``httpx`` and ``openai`` all read; the
adapters back off on a connection-time 503 within the request deadline, then say ``overloaded``."""

from __future__ import annotations

import asyncio
import resource
import threading
import time

import pytest
from served import served

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
requests = pytest.importorskip("requests")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

from pytest_invariance.adapters import AdapterError, make_adapter  # noqa: E402
from pytest_invariance.engine.config import EngineConfig, ModelConfig  # noqa: E402
from pytest_invariance.engine.overload_probe import burst_with_tail_probe  # noqa: E402
from pytest_invariance.engine.server import ServerThread, create_app  # noqa: E402
from pytest_invariance.engine.server_limits import MAX_BODY_BYTES, ServerLimits  # noqa: E402

TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, dtype="float32")
FD_LIMIT = 1024  # a common default soft limit
# A small engine queue: the cap, not the engine, is under test, and fewer admitted requests keep
# the burst's wall time down on a 2-core machine.
SERVE = ["--log-level", "warning", "--max-queue", "32"]


def _limit_fds(n: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return apply


def _kv_all_free(base: str) -> dict:
    deadline = time.monotonic() + 20
    while (kv := requests.get(base + "/server_info", timeout=10).json()["kv_blocks"])["free"] != kv["total"]:
        assert time.monotonic() < deadline, kv
        time.sleep(0.1)
    return kv


def _burst(tmp_path, clients: int, idle: int = 0):
    log = tmp_path / "server.log"
    with served(SERVE, log, _limit_fds(FD_LIMIT)) as (base, proc):
        port = int(base.rsplit(":", 1)[1])
        report = asyncio.run(burst_with_tail_probe("127.0.0.1", port, clients, idle=idle, timeout_s=120))
        _kv_all_free(base)
        assert proc.poll() is None
    assert "Too many open files" not in log.read_text(), log.read_text()[-2000:]
    return report


def _check_every_client_answered(report, clients: int) -> None:
    counts = report.counts()
    assert report.without_status() == 0 and set(counts) <= {"200", "503"}, counts
    assert sum(counts.values()) == clients and counts.get("200", 0) > 0, counts
    at_cap = sum("connection cap" in o.detail for o in report.outcomes) + report.idle_answered_503
    assert at_cap > 0, f"the connection cap was never reached: the test would pass vacuously ({counts})"
    assert report.tail_health.kind == "200" and report.tail_health.latency_s < 1.0, report.tail_health
    assert report.tail_probe.kind in ("200", "503"), report.tail_probe


def test_thousand_client_burst_at_1024_descriptors_every_client_gets_a_status(tmp_path) -> None:
    report = _burst(tmp_path, 1000)
    _check_every_client_answered(report, 1000)


def test_idle_flood_plus_burst_at_1024_descriptors_every_client_gets_a_status(tmp_path) -> None:
    report = _burst(tmp_path, 300, idle=1100)
    assert report.idle_opened == 1100 and report.idle_answered_503 > 1100 - FD_LIMIT, report.idle_answered_503
    _check_every_client_answered(report, 300)


@pytest.fixture(scope="module")
def base() -> str:
    cfg = EngineConfig(model=ModelConfig(**TINY, max_position=1024), max_num_seqs=4)
    with ServerThread(create_app(cfg, max_queue=8)) as url:
        yield url


BIG = "x" * (17 * 1024 * 1024)
assert len(BIG) > MAX_BODY_BYTES


def _chunks():
    body = ('{"prompt": "' + BIG + '", "max_tokens": 1}').encode()
    for i in range(0, len(body), 1 << 20):
        yield body[i : i + (1 << 20)]


def _requests(url: str, chunked: bool) -> int:
    if chunked:
        return requests.post(url, data=_chunks(), headers={"Content-Type": "application/json"}, timeout=60).status_code
    return requests.post(url, json={"prompt": BIG, "max_tokens": 1}, timeout=60).status_code


def _httpx(url: str, chunked: bool) -> int:
    if chunked:
        return httpx.post(url, content=_chunks(), headers={"Content-Type": "application/json"}, timeout=60).status_code
    return httpx.post(url, json={"prompt": BIG, "max_tokens": 1}, timeout=60).status_code


def _openai(url: str, chunked: bool) -> int:
    client = openai.OpenAI(base_url=url.removesuffix("/completions"), api_key="x", max_retries=0, timeout=60)
    try:
        client.completions.create(model="m", prompt=BIG, max_tokens=1)
    except openai.APIStatusError as e:
        return e.status_code
    return 200


CLIENTS = {"requests": _requests, "httpx": _httpx, "openai": _openai}


@pytest.mark.parametrize(("library", "chunked"), [("requests", False), ("requests", True), ("httpx", False),
                                                   ("httpx", True), ("openai", False)])  # fmt: skip
def test_17mb_body_is_a_413_every_client_library_reads(base: str, library: str, chunked: bool) -> None:
    """Declared (Content-Length) and streamed (chunked, where the 413 comes mid-body) alike."""
    assert CLIENTS[library](base + "/v1/completions", chunked) == 413
    r = requests.post(base + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}, timeout=30)
    assert r.status_code == 200, r.text[:200]  # the server is fine afterwards
    _kv_all_free(base)


def _one_connection_held_busy(url: str, release: threading.Event) -> threading.Thread:
    """A streamed completion that holds the server's one connection until ``release``."""
    started = threading.Event()

    def hold() -> None:
        body = {"prompt": "x", "max_tokens": 1000, "temperature": 0, "ignore_eos": True, "stream": True}
        with requests.post(url + "/v1/completions", json=body, stream=True, timeout=60) as r:
            lines = r.iter_lines()
            next(lines)
            started.set()
            release.wait(30)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert started.wait(30)
    return t


def test_adapter_backs_off_a_connection_time_503_and_says_overloaded_at_the_deadline() -> None:
    cfg = EngineConfig(model=ModelConfig(**TINY, max_position=2048), max_num_seqs=2)
    with ServerThread(create_app(cfg), limits=ServerLimits(max_connections=1)) as url:
        release = threading.Event()
        holder = _one_connection_held_busy(url, release)
        adapter = make_adapter("bundled", url, deadline_s=2.5, retries=0)
        t0 = time.monotonic()
        with pytest.raises(AdapterError) as info:
            adapter.get("/v1/models")
        took = time.monotonic() - t0
        assert info.value.field == "overloaded" and "connection cap (1)" in str(info.value), str(info.value)
        assert took < 3.0, took
        # The same wait ends in an answer once the connection is free within the deadline.
        threading.Timer(0.5, release.set).start()
        t0 = time.monotonic()
        models = make_adapter("bundled", url, deadline_s=10, retries=0).get("/v1/models")
        assert "data" in models and 0.5 < time.monotonic() - t0 < 5
        holder.join(30)


def test_413_then_a_clean_close_not_a_reset(base: str) -> None:
    """The mechanism behind the 413 every library reads: the server drains the body it refused and
    closes with a FIN, so a client still writing is never reset (Linux keeps a status that arrived
    before a reset readable; other stacks drop it)."""
    import socket

    host, port = base.removeprefix("http://").split(":")
    body = ('{"prompt": "' + BIG + '"}').encode()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
        s.sendall(body)  # a reset would raise here (ECONNRESET / EPIPE)
        answer = b""
        while chunk := s.recv(65536):  # ... or here
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413") and b"connection: close" in answer.lower(), answer[:300]
