"""The bundled engine as a live target: a client, and a subprocess that serves it.

A subprocess rather than an in-process thread so the engine's compute does not share the test
process's GIL (arrivals stay on time) and a crash cannot take pytest down. It binds a free loopback
port, ``start()`` waits for ``/health`` up to a deadline (failing with the log's tail if the
process dies first), ``stop()`` terminates it, and its log stays on disk for the report.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from .base import AdapterError
from .vllm import VLLMAdapter


class EngineUnavailable(RuntimeError):
    """The engine's optional dependencies (fastapi, uvicorn) are not installed."""


class BundledAdapter(VLLMAdapter):
    """The bundled server speaks vLLM's extras on /v1/completions and SGLang's side routes."""

    engine = "bundled"

    def server_info(self) -> dict | None:
        try:
            info = self.get("/server_info", timeout_s=30)
        except AdapterError:
            return None
        return info if isinstance(info, dict) else None

    def mode(self, info: dict | None) -> str | None:
        if info and info.get("mode") in ("invariant", "default"):
            return info["mode"]
        return super().mode(info)

    def flush_cache(self) -> bool:
        return self.post_succeeds("/flush_cache?timeout=60")

    def speculative_stats(self) -> dict[str, int] | None:  # its own /server_info, not vLLM's /metrics
        stats = (self.server_info() or {}).get("speculative_stats")
        return stats if isinstance(stats, dict) else None

    def step_batch_sizes(self) -> dict[int, int] | None:
        """``invariance_engine_steps_by_batch_size_total`` from ``/metrics`` (None when unreadable)."""
        try:
            text = self.get("/metrics", timeout_s=10)
        except AdapterError:
            return None
        return parse_steps_by_batch(text) if isinstance(text, str) else None


_STEPS_BY_BATCH = re.compile(r'^invariance_engine_steps_by_batch_size_total\{batch_size="(\d+)"\} (\d+)$', re.M)


def parse_steps_by_batch(text: str) -> dict[int, int]:
    return {int(bs): int(n) for bs, n in _STEPS_BY_BATCH.findall(text)}


def missing_engine_deps() -> list[str]:
    return [m for m in ("fastapi", "uvicorn", "torch") if importlib.util.find_spec(m) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BundledEngine:
    """``with BundledEngine(invariant=True) as adapter: ...`` serves the bundled engine meanwhile."""

    def __init__(
        self,
        *,
        invariant: bool,
        extra_args: list[str] | None = None,
        log_dir: str | os.PathLike | None = None,
        startup_timeout_s: float = 180.0,
        threads: int | None = None,
    ) -> None:
        self.invariant = invariant
        self.extra_args = list(extra_args or [])
        self.startup_timeout_s = startup_timeout_s
        self.threads = threads
        mode = "invariant" if invariant else "default"
        log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="pytest-invariance-engine-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"bundled-{mode}-{os.getpid()}-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen | None = None
        self.base_url = ""
        self.adapter: BundledAdapter | None = None

    def command(self, port: int) -> list[str]:
        cmd = [sys.executable, "-m", "pytest_invariance.engine.server", "--host", "127.0.0.1",
               "--port", str(port), "--log-level", "warning", *self.extra_args]  # fmt: skip
        if self.invariant:
            cmd.append("--batch-invariant")
        return cmd

    def start(self) -> BundledAdapter:
        missing = missing_engine_deps()
        if missing:
            raise EngineUnavailable(
                f"the bundled engine needs {', '.join(missing)} (pip install 'pytest-invariance[engine]')"
            )
        port = free_port()
        env = dict(os.environ)
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        log = open(self.log_path, "wb")  # noqa: SIM115 - kept open for the process's lifetime
        self._log = log
        self.proc = subprocess.Popen(self.command(port), stdout=log, stderr=subprocess.STDOUT, env=env,
                                     stdin=subprocess.DEVNULL)  # fmt: skip
        self.base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            status = self.proc.poll()
            if status is not None:
                self.stop()
                raise RuntimeError(
                    f"bundled engine exited with status {status} before it was healthy: {self.log_tail()}"
                )
            try:
                if requests.get(self.base_url + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"bundled engine at {self.base_url} not healthy within {self.startup_timeout_s:g} s (log {self.log_path})"
                )
            time.sleep(0.1)
        self.adapter = BundledAdapter(self.base_url)
        return self.adapter

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc is not None:
            self.proc = None
            self.returncode = proc.returncode
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()

    def __enter__(self) -> BundledAdapter:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
