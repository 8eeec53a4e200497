"""Serve an app from a background thread (tests and in-process sweeps)."""

from __future__ import annotations

import threading
import time

from fastapi import FastAPI

from .server_limits import ServerLimits, make_server, uvicorn_config


class ServerThread:
    """Serve an app from a background thread on a free loopback port (tests, in-process sweeps).

    ``with ServerThread(app) as base_url: ...`` blocks until the server accepts connections and
    stops it (lifespan shutdown included) on exit.
    """

    def __init__(
        self,
        app: FastAPI,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout_s: float = 60.0,
        limits: ServerLimits | None = None,
    ):

        self._server = make_server(uvicorn_config(app, host, port, "warning", limits))
        self._timeout = startup_timeout_s
        self._thread: threading.Thread | None = None
        self.base_url = ""

    def __enter__(self) -> str:
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server thread failed to start")
            time.sleep(0.01)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.base_url = f"http://{host}:{port}"
        return self.base_url

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
