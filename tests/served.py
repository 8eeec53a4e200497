"""``pytest-invariance serve`` in a subprocess for tests: started on a free loopback port, healthy
within a deadline (else the assertion names the log), stopped on exit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(args: list[str], log: Path, preexec_fn: Callable[[], None] | None = None,
           startup_s: float = 120.0) -> Iterator[tuple[str, subprocess.Popen]]:  # fmt: skip
    """``(base_url, process)`` of a server started with ``args``; its output goes to ``log``."""
    port = free_port()
    cmd = [sys.executable, "-m", "pytest_invariance.engine.server", "--port", str(port), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ},
                                preexec_fn=preexec_fn)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if requests.get(base + "/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, f"server did not become healthy: {log.read_text()[-2000:]}"
            time.sleep(0.2)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
