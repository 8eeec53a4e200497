"""One HTTP exchange under a hard wall-clock deadline.

Why: ``requests`` timeouts bound each wait on the socket, not the exchange. A server that sends one
byte a second never trips a 120 s read timeout and can hold a sweep for as long as it likes (one
measured drip held a suite for over five minutes). Here a timer shuts the exchange's socket down at
the deadline, which wakes the blocked read in whatever phase it is (headers or body), so the call
returns within the deadline plus a few milliseconds. Every exchange gets its own session, hence its
own connection: requests never share a keep-alive connection, as in a plain ``requests.request``.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

_current = threading.local()


class DeadlineExceeded(Exception):
    """The exchange was cut off at its deadline."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"no complete answer within {seconds:g} s")


class _Deadline:
    """Shuts down every socket the current thread opens for this exchange once ``seconds`` pass."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def register(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            late = self.fired.is_set()
        if late:
            _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired.set()
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def __enter__(self) -> _Deadline:
        _current.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()
        _current.deadline = None


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _register(sock: socket.socket) -> socket.socket:
    deadline = getattr(_current, "deadline", None)
    if deadline is not None:
        deadline.register(sock)
    return sock


class _Conn(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        return _register(super()._new_conn())


class _TLSConn(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        return _register(super()._new_conn())


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Conn


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _TLSConn


class _Transport(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}


def exchange(
    method: str,
    url: str,
    *,
    body: Any,
    headers: dict[str, str],
    timeout: tuple[float, float],
    deadline_s: float,
) -> requests.Response:
    """``requests.request`` with the body read in full, cut off at ``deadline_s`` (then
    :class:`DeadlineExceeded`); any other failure is ``requests``' own exception."""
    with requests.Session() as session, _Deadline(deadline_s) as deadline:
        session.mount("http://", _Transport())
        session.mount("https://", _Transport())
        try:
            return session.request(method, url, json=body, headers=headers, timeout=timeout)
        except Exception:
            if deadline.fired.is_set():
                raise DeadlineExceeded(deadline_s) from None
            raise


def never_connected(exc: BaseException) -> bool:
    """True when the TCP connection was refused/unroutable, i.e. the server never saw the request."""
    import urllib3.exceptions as u3

    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (u3.NewConnectionError, ConnectionRefusedError)):
            return True
        stack.extend(
            [
                getattr(e, "reason", None),
                e.__cause__,
                e.__context__,
                *[a for a in e.args if isinstance(a, BaseException)],
            ]
        )
    return False


_BAD_URL = (
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidSchema,
    requests.exceptions.InvalidURL,
    requests.exceptions.URLRequired,
    requests.exceptions.InvalidHeader,
)


def describe_failure(exc: BaseException, connect_s: float, read_s: float) -> tuple[str, str]:
    """``(field, message)`` for a failed exchange: what failed, in words a user can act on."""
    if isinstance(exc, DeadlineExceeded):
        return "deadline", f"{exc} (the request deadline; --invariance-request-deadline raises it)"
    if isinstance(exc, requests.ConnectTimeout):
        return "timeout", f"no connect within {connect_s:g} s"
    if isinstance(exc, requests.Timeout):
        return "timeout", f"no response within {read_s:g} s"
    if isinstance(exc, _BAD_URL):
        return "url", f"not a usable http(s) URL ({type(exc).__name__})"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "connection", "answer cut short: connection reset or closed mid-body"
    if isinstance(exc, requests.ConnectionError):
        if never_connected(exc):
            return "connection", "connection refused"
        return "connection", "connection reset or closed mid-response"
    return "transport", f"{type(exc).__name__}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "(no message)"
