"""Limits that keep the bundled server from being tied up by slow or idle clients.

Why: uvicorn bounds neither how long a client may take to send its request head nor its body, and
accepts connections until the process runs out of file descriptors. Measured before these limits:
a 60-byte body sent at 1 byte/s was accepted after 60 s, and 1,100 idle connections under
``ulimit -n 1024`` made ``accept`` fail (EMFILE) so that every valid request timed out. Here:

- a **header timeout**: a connection must deliver a complete request head within
  ``header_timeout_s`` of opening (or of its previous response), else it is closed;
- a **body timeout** and size cap: the whole body within ``body_timeout_s`` of its head (else 408,
  connection closed) and at most ``MAX_BODY_BYTES`` (else 413);
- a **connection cap** below the descriptor limit that always answers (``server_protocol``): at
  the cap the longest-idle connection (no request in flight) is answered 503 and closed to make
  room; when every connection is busy the newcomer itself is answered 503 with ``Retry-After``;
  every close lingers, so the client reads its status before any reset;
- uvicorn's own **keep-alive timeout**.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # types only: `serve --help` must work where starlette is not installed
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

# What one server admits, besides the engine's own max_num_seqs.
DEFAULT_MAX_QUEUE = 256
DEFAULT_MAX_N = 16
DEFAULT_MAX_PROMPTS = 256

MAX_BODY_BYTES = 16 * 1024 * 1024
# Connections the kernel holds before the server accepts them. They cost the server no descriptor,
# and a full queue drops SYNs, which clients retry after 1, 3, 7, 15, 31 s: measured with a queue of
# 16 under ``ulimit -n 256``, 18 of 1,000 clients behind 1,100 idle sockets had no answer in 60 s.
LISTEN_QUEUE = 4096
FD_RESERVE = 64  # descriptors left for the engine, logs and the listening socket


@dataclass(frozen=True)
class ServerLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    max_connections: int | None = None  # None: the descriptor limit minus FD_RESERVE (at most 4096)

    def connection_cap(self) -> int:
        """Open connections at most: the descriptor limit less a reserve for the engine, less three
        accept bursts (asyncio accepts up to ``backlog`` sockets per turn of its loop, and a socket
        is answered only two turns later, closed one turn after its close) and less the lingering
        reserve."""
        if self.max_connections is not None:
            return self.max_connections
        soft = _fd_limit()
        if soft is None:
            return 4096
        return max(8, min(4096, soft - FD_RESERVE - 3 * self.backlog() - self.linger_reserve()))

    def linger_reserve(self) -> int:
        """Connections that may linger at once (answered and closing, still holding a descriptor):
        one accept burst, so that a burst of refusals can all linger."""
        return self.backlog()

    def backlog(self) -> int:
        """asyncio's accept burst (what uvicorn calls the backlog): small under a low descriptor
        limit. The kernel's listen queue is made longer afterwards (``LISTEN_QUEUE``, ``make_server``)."""
        soft = _fd_limit()
        return 2048 if soft is None else max(16, min(2048, soft // 16))


def _fd_limit() -> int | None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


class BodyLimitMiddleware:
    """Reads a request's whole body under the body timeout and the size cap, then hands the app a
    replay of it (later ``receive`` calls go to the client, so disconnects are still seen)."""

    def __init__(self, app: ASGIApp, body_timeout_s: float = 30.0, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.body_timeout_s, self.max_bytes = app, body_timeout_s, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await _refuse(send, 413, f"request body over {self.max_bytes} bytes")
            return
        deadline = asyncio.get_running_loop().time() + self.body_timeout_s
        chunks, size = [], 0
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), max(remaining, 0.0))
            except TimeoutError:
                await _refuse(send, 408, f"request body not received within {self.body_timeout_s:g} s")
                return
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await _refuse(send, 413, f"request body over {self.max_bytes} bytes")
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _refuse(send: Send, status: int, message: str) -> None:
    """An OpenAI-style error that also closes the connection: the close lingers
    (``server_protocol``), draining the unread rest of the body so the client reads this status."""
    kind = "invalid_request_error"
    body = json.dumps({"error": {"message": message, "type": kind, "param": "body", "code": None}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def uvicorn_config(app: Any, host: str, port: int, log_level: str, limits: ServerLimits | None = None) -> Any:
    """The one uvicorn configuration of the bundled server (command line and in-process threads)."""
    import uvicorn

    from .server_protocol import protocol_class

    limits = limits or ServerLimits()
    return uvicorn.Config(
        BodyLimitMiddleware(app, limits.body_timeout_s),
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        http=protocol_class(limits.connection_cap(), limits.linger_reserve(), limits.header_timeout_s),
        timeout_keep_alive=limits.keep_alive_s,
        backlog=limits.backlog(),
    )


def make_server(config: Any) -> Any:
    """A ``uvicorn.Server`` whose listening sockets get a kernel queue of ``LISTEN_QUEUE`` once
    bound (uvicorn gives ``listen`` and asyncio's accept burst one number; only the burst costs
    descriptors)."""
    import socket

    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            for server in getattr(self, "servers", []):
                for sock in server.sockets:
                    with socket.socket(fileno=os.dup(sock.fileno())) as dup:  # same socket, own descriptor
                        dup.listen(LISTEN_QUEUE)

    return Server(config)
