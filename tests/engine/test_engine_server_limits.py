"""The server cannot be tied up: slow heads and bodies are cut off, idle connections cannot lock
valid requests out under a low descriptor limit (overload itself: test_engine_server_overload), hostile JSON is a 400 before any generation, a
500 carries no exception text and announces the close, ``HEAD /health`` answers."""

from __future__ import annotations

import resource
import socket
import time

import pytest
from served import served

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
requests = pytest.importorskip("requests")

from pytest_invariance.engine.config import EngineConfig, ModelConfig  # noqa: E402
from pytest_invariance.engine.server import ServerThread, create_app  # noqa: E402
from pytest_invariance.engine.server_limits import ServerLimits  # noqa: E402

TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, dtype="float32")
FAST = ServerLimits(header_timeout_s=1.0, body_timeout_s=1.0, keep_alive_s=1.0)


def tiny_app():
    return create_app(EngineConfig(model=ModelConfig(**TINY, max_position=1024), max_num_seqs=4), max_queue=8)


@pytest.fixture(scope="module")
def base() -> str:
    app = tiny_app()

    async def boom() -> None:
        raise RuntimeError("secret internals /etc/passwd")

    app.add_api_route("/test-boom", boom, methods=["GET"])
    with ServerThread(app, limits=FAST) as url:
        yield url


def _connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    return s


def _read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def test_slow_body_is_cut_off_with_408(base: str) -> None:
    s = _connect(base)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 60\r\n\r\n")  # fmt: skip
    t0 = time.monotonic()
    for _ in range(4):  # a byte every 0.3 s, far short of 60 bytes in time
        s.sendall(b"{")
        time.sleep(0.3)
    answer = _read_all(s)
    took = time.monotonic() - t0
    assert answer.startswith(b"HTTP/1.1 408") and b"connection: close" in answer.lower(), answer
    assert took < 3, took


def test_slow_head_and_idle_connections_are_closed(base: str) -> None:
    drip, idle = _connect(base), _connect(base)
    t0 = time.monotonic()
    drip.sendall(b"GET /health HTTP/1.1\r\n")
    for _ in range(3):
        drip.sendall(b"X-A: b\r\n")
        time.sleep(0.3)
    assert _read_all(drip) == b"" and _read_all(idle) == b""  # closed without an answer
    assert time.monotonic() - t0 < 3


def test_hostile_json_is_400_before_generation(base: str) -> None:
    before = requests.get(base + "/metrics", timeout=10).text
    bodies = {
        "deep": b'{"prompt": "x", "max_tokens": 1, "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "deeper": b"[" * 100_000 + b"]" * 100_000,
        "prompt": b'{"prompt": "a\\ud800b", "max_tokens": 1}',
        "model": b'{"prompt": "ab", "model": "\\udfff", "max_tokens": 1}',
        "messages": b'{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 1}',
        "key": b'{"\\ud800": 1, "prompt": "ab"}',
        "rid": b'{"text": "ab", "rid": "\\ud83d", "sampling_params": {"max_new_tokens": 1}}',
    }
    for name, raw in bodies.items():
        path = {"messages": "/v1/chat/completions", "rid": "/generate"}.get(name, "/v1/completions")
        r = requests.post(base + path, data=raw, headers={"Content-Type": "application/json"}, timeout=10)
        assert r.status_code == 400, (name, r.status_code, r.text[:200])
        msg = r.json()["error"]["message"]
        assert ("nested deeper" in msg) if name.startswith("deep") else ("lone surrogate" in msg), (name, msg)
    after = requests.get(base + "/metrics", timeout=10).text
    gen = [line for line in after.splitlines() if line.startswith("invariance_engine_generation_tokens_total")]
    assert gen == [line for line in before.splitlines() if line.startswith("invariance_engine_generation_tokens_total")]


def test_500_has_no_exception_text_and_closes(base: str) -> None:
    s = _connect(base)
    s.sendall(b"GET /test-boom HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = _read_all(s)
    assert answer.startswith(b"HTTP/1.1 500") and b"connection: close" in answer.lower(), answer
    assert b"secret" not in answer and b"RuntimeError" not in answer and b"internal error" in answer
    assert requests.get(base + "/health", timeout=10).status_code == 200  # the server is fine


def test_head_health(base: str) -> None:
    r = requests.head(base + "/health", timeout=10)
    assert r.status_code == 200 and r.content == b""


def _limit_fds(n: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return apply


FD_LIMIT = 256
IDLE = 300  # more idle connections than the server has descriptors


def test_idle_connections_beyond_the_fd_limit_do_not_lock_out_a_valid_request(tmp_path) -> None:
    log = tmp_path / "server.log"
    idle: list[socket.socket] = []
    with served(["--log-level", "warning", "--header-timeout", "60"], log, _limit_fds(FD_LIMIT)) as (base, proc):
        port = int(base.rsplit(":", 1)[1])
        try:
            for _ in range(IDLE):
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(0.5)  # let the server accept them all
            t0 = time.monotonic()
            r = requests.post(base + "/v1/completions", json={"prompt": "hi", "max_tokens": 2, "temperature": 0},
                              timeout=30)  # fmt: skip
            took = time.monotonic() - t0
            assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) == 2, r.text[:200]
            assert took < 10, took
            evicted = sum(1 for s in idle if _answered_503_or_closed(s))
            assert evicted >= IDLE - FD_LIMIT, evicted  # the longest-idle ones made room
            assert proc.poll() is None
        finally:
            for s in idle:
                s.close()
    out = log.read_text()
    assert "Too many open files" not in out, out[-2000:]


def _answered_503_or_closed(s: socket.socket) -> bool:
    """An evicted idle connection is answered 503 (then closed); one the client could read."""
    s.setblocking(False)
    try:
        got = s.recv(12)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return got == b"" or got.startswith(b"HTTP/1.1 503")


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/generate"])
def test_stop_token_ids_capped_and_in_vocabulary(base: str, path: str) -> None:
    def body(stops: list[int]) -> dict:
        if path == "/generate":
            return {"text": "hi", "sampling_params": {"max_new_tokens": 1, "stop_token_ids": stops}}
        key = {"prompt": "hi"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
        return {**key, "max_tokens": 1, "stop_token_ids": stops}

    for stops, says in (([1] * 257, "at most 256 stop token ids"), ([5, 10**9], "token id 1000000000 is outside")):
        r = requests.post(base + path, json=body(stops), timeout=10)
        assert r.status_code == 400 and says in r.json()["error"]["message"], r.text[:300]
    assert requests.post(base + path, json=body([1] * 256), timeout=30).status_code == 200


def test_subnormal_temperature_is_greedy_not_nan(base: str) -> None:
    def ids(temperature: float) -> list[int]:
        r = requests.post(base + "/v1/completions", json={"prompt": "Hello", "max_tokens": 8,
                          "temperature": temperature, "seed": 1}, timeout=30)  # fmt: skip
        assert r.status_code == 200, r.text[:300]
        return r.json()["choices"][0]["token_ids"]

    greedy = ids(0)
    assert ids(1e-320) == greedy and ids(5e-6) == greedy
    assert len(set(greedy)) > 1 or greedy[0] != 0  # not the NaN signature (token 0 every step)


def _kv(base: str, idle: bool = False) -> dict:
    info = requests.get(base + "/server_info", timeout=10).json()["kv_blocks"]
    if idle:  # /metrics says the same (compared only at rest, where nothing moves in between)
        text = requests.get(base + "/metrics", timeout=10).text
        for key in ("free", "used", "total"):
            assert f"invariance_engine_kv_blocks_{key} {info[key]}\n" in text + "\n", (key, info)
    return info


def test_kv_blocks_in_metrics_and_server_info_come_back_after_a_dropped_stream(base: str) -> None:
    idle = _kv(base, idle=True)
    assert idle["total"] > 0 and idle["free"] == idle["total"] and idle["used"] == 0
    body = {"prompt": "x" * 20, "max_tokens": 1000, "temperature": 0, "ignore_eos": True, "stream": True}
    with requests.post(base + "/v1/completions", json=body, stream=True, timeout=30) as r:
        assert r.status_code == 200, r.text[:300]
        lines = r.iter_lines()
        first = next(lines)
        # The opening chunk can leave before the first step has published its stats: poll while
        # the stream is live (1000 tokens take far longer than this bound).
        until = time.monotonic() + 10
        during = _kv(base)
        while during["used"] == 0 and time.monotonic() < until:
            next(lines)
            during = _kv(base)
        assert during["used"] > 0, (during, first[:300])
    deadline = time.monotonic() + 10
    while _kv(base)["free"] != idle["total"]:
        assert time.monotonic() < deadline, _kv(base)
        time.sleep(0.05)
    _kv(base, idle=True)


def test_retry_after_grows_with_the_clients_already_waiting() -> None:
    """Rejected clients get successive slots in the measured drain, not one shared fixed wait."""
    cfg = EngineConfig(model=ModelConfig(**TINY, max_position=1024), max_num_seqs=1)
    with ServerThread(create_app(cfg, max_queue=0, retry_after_s=0.01)) as url:
        slow = {"prompt": "a", "max_tokens": 60, "ignore_eos": True}
        for _ in range(5):  # a drain rate to measure, slow enough that each promised slot outlasts a request
            assert requests.post(url + "/v1/completions", json=slow, timeout=30).ok
        body = {"prompt": "x", "max_tokens": 1000, "temperature": 0, "ignore_eos": True, "stream": True}
        with requests.post(url + "/v1/completions", json=body, stream=True, timeout=60) as r:
            lines = r.iter_lines()
            next(lines)
            waits = []
            for _ in range(6):
                busy = requests.post(url + "/v1/completions", json={"prompt": "y", "max_tokens": 1}, timeout=30)
                assert busy.status_code == 503 and busy.json()["error"]["code"] == "overloaded"
                waits.append(int(busy.headers["retry-after-ms"]))
    assert waits[-1] > 4 * waits[0], waits  # later clients wait longer (a fixed wait with jitter: at most 3x)
