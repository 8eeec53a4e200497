"""The bundled server's HTTP/1.1 protocol: uvicorn's h11 protocol with a header timeout, a
connection cap that always answers, and a lingering close.

Why: closing a socket whose receive buffer still holds the client's bytes makes the kernel send a
reset, and a client that is still writing (a 17 MB body, a request sent just as the server closed)
then reports a dropped connection with no status. Measured before: a 1,000-client burst under
``ulimit -n 1024`` left 153-295 clients with a bare reset, 858 at ``ulimit -n 256``. Here:

- every close the server decides on is a **lingering close**: the answer is flushed, the write side
  shut (FIN), and the connection read and discarded until the client closes, ``LINGER_BYTES`` have
  been drained or ``LINGER_S`` pass, so the client reads the status before any reset;
- a connection **over the cap** is answered ``503`` with ``Retry-After`` and ``Connection: close``
  straight from the protocol, before its request is read; at the cap the longest-idle connection
  (no request in flight) is given that answer instead, so idle sockets cannot lock requests out;
- lingering connections hold descriptors from a reserve of their own (``ServerLimits``); when it is
  spent, the oldest of them (answered longest ago) is closed outright.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

LINGER_S = 2.0  # a closing connection is read and discarded this long at most
LINGER_BYTES = 64 * 1024 * 1024  # ... and this many bytes at most (4 bodies of the size cap)


def overload_answer(cap: int) -> bytes:
    """The protocol-level 503: an OpenAI-style error body, whole-second ``Retry-After`` and a
    jittered ``retry-after-ms`` (the openai client honours it) so refused clients do not return at once."""
    body = json.dumps({"error": {"message": f"server overloaded: at its connection cap ({cap}); retry later",
                                 "type": "server_overloaded", "param": None, "code": "overloaded"}}).encode()  # fmt: skip
    head = (f"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
            f"retry-after-ms: {random.randint(1000, 2000)}\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n\r\n")  # fmt: skip
    return head.encode() + body


class LingeringTransport:
    """The transport uvicorn sees: ``close()`` becomes a lingering close (flush, FIN, drain);
    everything else goes to the real transport."""

    def __init__(self, real: asyncio.Transport, on_linger: Any) -> None:
        self.real, self._on_linger = real, on_linger
        self.lingering = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def is_closing(self) -> bool:
        return self.lingering or self.real.is_closing()

    def write(self, data: bytes) -> None:
        if not self.is_closing():
            self.real.write(data)

    def close(self) -> None:
        if self.is_closing():
            return
        self.lingering = True
        if self.real.can_write_eof():
            self.real.write_eof()  # sent after what is buffered
        self.real.resume_reading()  # flow control may have paused it: the drain must read
        self._on_linger()

    def abort(self) -> None:
        self.real.abort()


def protocol_class(cap: int, linger_reserve: int, header_s: float) -> type:
    """uvicorn's h11 protocol with the header timeout, the answering cap and the lingering close."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class LimitedH11Protocol(H11Protocol):
        refused = 0  # newcomers answered 503 at the cap (tests and the load benchmark read these)
        evicted = 0  # idle connections answered 503 to make room
        lingering: dict[Any, None] = {}  # noqa: RUF012 - one registry per server, oldest first

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self._linger_timer: asyncio.TimerHandle | None = None
            self._drained = 0
            self._idle_since = time.monotonic()
            self._seen_cycle: Any = None
            self._head_timer: asyncio.TimerHandle | None = None
            super().connection_made(LingeringTransport(transport, self._start_linger))  # type: ignore[arg-type]
            if len(self.connections) > cap:
                victim = self._longest_idle()
                if victim is None:
                    type(self).refused += 1
                    self._answer_overloaded()
                    return
                type(self).evicted += 1
                victim._answer_overloaded()
            self._arm_head_timer()

        def _busy(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _longest_idle(self) -> Any:
            idle = [c for c in self.connections if c is not self and not c._busy() and hasattr(c, "_idle_since")]
            return min(idle, key=lambda c: c._idle_since) if idle else None

        def _answer_overloaded(self) -> None:
            """503 before (or instead of) reading a request, then the lingering close."""
            self.transport.write(overload_answer(cap))
            self.transport.close()

        def _start_linger(self) -> None:
            self.connections.discard(self)
            self._unset_keepalive_if_required()
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            reg = type(self).lingering
            while len(reg) >= linger_reserve:  # the reserve is spent: close the longest-answered
                oldest = next(iter(reg))
                oldest._end_linger()
            reg[self] = None
            self._linger_timer = self.loop.call_later(LINGER_S, self._end_linger)

        def _end_linger(self) -> None:
            type(self).lingering.pop(self, None)
            if self._linger_timer is not None:
                self._linger_timer.cancel()
                self._linger_timer = None
            self.transport.real.close()

        def _arm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(header_s, self._head_timeout)

        def _head_timeout(self) -> None:
            self._head_timer = None
            if not self._busy() and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self.transport.lingering:
                self._drained += len(data)
                if self._drained > LINGER_BYTES:
                    self._end_linger()
                return
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._seen_cycle:
                self._seen_cycle = self.cycle  # a complete request head arrived
                if self._head_timer is not None:
                    self._head_timer.cancel()
                    self._head_timer = None

        def eof_received(self) -> bool | None:
            if self.transport.lingering:
                self._end_linger()  # the client has read the answer and closed: done
            return None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._idle_since = time.monotonic()
            if not self.transport.is_closing():
                self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            type(self).lingering.pop(self, None)
            for timer in (self._head_timer, self._linger_timer):
                if timer is not None:
                    timer.cancel()
            super().connection_lost(exc)

    LimitedH11Protocol.lingering = {}
    return LimitedH11Protocol
