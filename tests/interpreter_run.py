"""Run a script under the Triton interpreter in its own process (shared by the kernel tests).

The interpreter must be chosen before triton is imported, and a test process has usually imported it
already; a child process with ``TRITON_INTERPRET=1`` runs the script from scratch."""

from __future__ import annotations

import os
import subprocess
import sys


def run_interpreted(script: str, expect: str, timeout: float = 600) -> str:
    """Run ``script``; assert it exits 0 and prints ``expect``; its stdout."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0 and expect in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout
