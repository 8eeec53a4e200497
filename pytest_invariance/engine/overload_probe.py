"""A burst of raw HTTP clients that tells a reset from a 503: what each client of an overloaded
server saw, a status or none.

Why raw sockets: a client library folds a reset, an early close and a refused connect into one
exception, and may retry behind our back. Here each client opens its own connection, sends one
request, reads one answer, and is tallied as ``200``, ``503`` (with or without ``Retry-After``),
another status, ``reset`` (the connection was reset or closed before a status line) or
``timeout``. Used by the overload tests and ``benchmarks/bench_overload.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass

NO_STATUS = ("reset", "timeout")  # the outcomes a client cannot tell from a dead server


@dataclass(frozen=True)
class Outcome:
    """One client's answer: ``kind`` is the tally key, ``latency_s`` from connect to answer,
    ``detail`` the start of an error answer's body (or what cut the exchange short)."""

    kind: str
    status: int | None
    retry_after: str | None
    latency_s: float
    detail: str = ""


def health_request(host: str, port: int) -> bytes:
    """``GET /health``, ``Connection: close``: answered by the server without the engine's queue."""
    return f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()


def completion_request(host: str, port: int, prompt: str = "hi", max_tokens: int = 2) -> bytes:
    """A valid non-streaming ``/v1/completions`` request, ``Connection: close``."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")  # fmt: skip
    return head.encode() + body


async def exchange(host: str, port: int, request: bytes, timeout_s: float) -> Outcome:
    """Connect, send ``request``, read the status line and headers (and the body, by its length)."""
    t0 = time.monotonic()
    try:
        kind, status, retry, detail = await asyncio.wait_for(_exchange(host, port, request), timeout_s)
    except asyncio.TimeoutError:
        kind, status, retry, detail = "timeout", None, None, f"no answer within {timeout_s:g} s"
    except (ConnectionResetError, BrokenPipeError, ConnectionRefusedError, ConnectionAbortedError) as e:
        kind, status, retry, detail = "reset", None, None, type(e).__name__
    return Outcome(kind, status, retry, time.monotonic() - t0, detail)


async def _exchange(host: str, port: int, request: bytes) -> tuple[str, int | None, str | None, str]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        try:
            writer.write(request)
            await writer.drain()
        except (ConnectionResetError, BrokenPipeError):
            pass  # the answer may still be readable: read it, as a client library would
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            return "reset", None, None, f"closed after {len(e.partial)} bytes, no status line"
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:] if ":" in x)}
        try:
            body = await reader.readexactly(int(headers.get("content-length", "0")))
        except asyncio.IncompleteReadError:
            return "reset", status, None, f"HTTP {status}, body cut short"
        retry = headers.get("retry-after")
        kind = str(status) if status != 503 else ("503" if retry else "503 without Retry-After")
        return kind, status, retry, "" if status == 200 else body[:200].decode("utf-8", "replace")
    finally:
        writer.close()


async def burst(host: str, port: int, clients: int, timeout_s: float = 60.0,
                request: bytes | None = None) -> list[Outcome]:  # fmt: skip
    """``clients`` exchanges started at once, each on its own connection."""
    req = request or completion_request(host, port)
    return list(await asyncio.gather(*(exchange(host, port, req, timeout_s) for _ in range(clients))))


async def open_idle(host: str, port: int, n: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """``n`` connections that never send a byte (an idle-socket flood)."""
    pairs = await asyncio.gather(*(asyncio.open_connection(host, port) for _ in range(n)), return_exceptions=True)
    return [p for p in pairs if not isinstance(p, BaseException)]


async def _answered_503(reader: asyncio.StreamReader, wait_s: float) -> bool:
    try:
        return (await asyncio.wait_for(reader.read(12), wait_s)).startswith(b"HTTP/1.1 503")
    except (asyncio.TimeoutError, ConnectionError):
        return False


def tally(outcomes: list[Outcome]) -> dict[str, int]:
    """Counts by kind, most common first."""
    return dict(Counter(o.kind for o in outcomes).most_common())


@dataclass(frozen=True)
class BurstReport:
    """A burst's outcomes, the valid requests sent in its tail (a completion, which queues behind
    the admitted ones, and ``/health``, which does not), and its wall time."""

    outcomes: list[Outcome]
    tail_probe: Outcome
    tail_health: Outcome
    idle_opened: int
    idle_answered_503: int  # idle sockets the server answered 503 to make room (evicted)
    wall_s: float

    def counts(self) -> dict[str, int]:
        return tally(self.outcomes)

    def without_status(self) -> int:
        return sum(1 for o in self.outcomes if o.kind in NO_STATUS)


async def burst_with_tail_probe(host: str, port: int, clients: int, *, idle: int = 0, timeout_s: float = 60.0,
                                tail_fraction: float = 0.9) -> BurstReport:  # fmt: skip
    """Open ``idle`` silent connections, then start ``clients`` exchanges at once; when
    ``tail_fraction`` of them have their answers, send a valid completion and ``/health``, timed."""
    t0 = time.monotonic()
    flood = await open_idle(host, port, idle) if idle else []
    req = completion_request(host, port)
    tasks = [asyncio.ensure_future(exchange(host, port, req, timeout_s)) for _ in range(clients)]
    pending = set(tasks)
    while len(pending) > clients * (1 - tail_fraction):
        _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    probe, health = await asyncio.gather(exchange(host, port, req, timeout_s),
                                         exchange(host, port, health_request(host, port), timeout_s))  # fmt: skip
    outcomes = list(await asyncio.gather(*tasks))
    wall = time.monotonic() - t0
    evicted = sum(await asyncio.gather(*(_answered_503(r, 0.5) for r, _ in flood)))
    for _, w in flood:
        w.close()
    return BurstReport(outcomes, probe, health, len(flood), evicted, wall)
