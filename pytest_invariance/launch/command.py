"""``pytest-invariance launch [--census FILE] -- CMD ...``: run any engine under the reference kernels.

The launcher starts ``CMD`` with the boot folder on its ``PYTHONPATH`` (``boot``), forwards
SIGTERM and SIGINT to it, waits, merges the census parts of every process into ``FILE`` and exits
with the command's own status (128 + N for a signal N). Bad input is one line and status 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

EXIT_USAGE = 2
GRACE_S = 60.0  # after a forwarded SIGTERM, how long the engine gets before SIGKILL


class LaunchError(Exception):
    """A command line the launcher cannot run: the message says what was wrong."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--census", metavar="FILE", default=None,
                   help="record every aten and custom op the engine calls (shapes, routed or not) into FILE")  # fmt: skip
    p.add_argument("--plugin-only", action="store_true",
                   help="set the environment only, no sitecustomize: the engine activates itself through the "
                        "vllm.general_plugins entry point (pytest-invariance installed in the engine's venv)")  # fmt: skip
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the engine's command line")


def _command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise LaunchError("launch: no command given (pytest-invariance launch [--census FILE] -- CMD ...)")
    if shutil.which(cmd[0]) is None:
        raise LaunchError(f"launch: {cmd[0]!r}: no such command or not executable")
    return cmd


def _census_path(text: str | None) -> Path | None:
    if text is None:
        return None
    from .census_file import parts_dir

    path = Path(text).resolve()
    if path.is_dir():
        raise LaunchError(f"--census {text}: is a directory, a file name is expected")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LaunchError(f"--census {text}: cannot create its folder ({exc.strerror or exc})") from None
    stale = parts_dir(path)
    if stale.is_dir():
        shutil.rmtree(stale)
    return path


def _wait(proc: subprocess.Popen) -> int:
    """The child's status, forwarding SIGTERM / SIGINT to it while it runs."""
    forwarded: list[int] = []

    def forward(signum: int, frame: object) -> None:
        forwarded.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    deadline = None
    try:
        while True:  # short waits: a signal handler cannot cut a blocking wait short (PEP 475)
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if forwarded and deadline is None:
                    deadline = time.monotonic() + GRACE_S
                if deadline is not None and time.monotonic() > deadline:
                    print(f"pytest-invariance launch: pid {proc.pid} still running {GRACE_S:.0f} s after "
                          f"signal {forwarded[0]}; killing it", file=sys.stderr)  # fmt: skip
                    proc.kill()
                    deadline = float("inf")
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 128 - rc if rc < 0 else rc


def run(args: argparse.Namespace) -> int:
    """Run the launch subcommand; returns the exit status."""
    import pytest_invariance

    from . import census_file
    from .boot import child_env, make_boot_dir

    try:
        cmd = _command(args)
        census = _census_path(args.census)
    except LaunchError as exc:
        print(f"pytest-invariance: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    boot = None if args.plugin_only else make_boot_dir(Path(pytest_invariance.__file__).resolve().parent)
    try:
        try:
            proc = subprocess.Popen(cmd, env=child_env(dict(os.environ), boot, census))
        except OSError as exc:
            print(f"pytest-invariance: error: launch: cannot start {cmd[0]!r}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_USAGE
        rc = _wait(proc)
    finally:
        if boot is not None:
            shutil.rmtree(boot, ignore_errors=True)
    if census is not None:
        merged = census_file.merge(census, cmd, rc)
        print(f"pytest-invariance launch: {summary(merged)} -> {census}", file=sys.stderr)
    return rc


def summary(census: dict) -> str:
    """One line: processes, calls, and the unrouted / declined ops by name."""
    from .classify import DECLINED, UNROUTED

    ops = census.get("ops", [])
    calls = sum(r["calls"] for r in ops)
    names = {s: sorted({r["op"] for r in ops if r["status"] == s}) for s in (UNROUTED, DECLINED)}
    line = f"census of {len(census.get('processes', []))} process(es), {calls} calls, {len({r['op'] for r in ops})} ops"
    for s, found in names.items():
        if found:
            line += f"; {s}: {len(found)} ({', '.join(found[:6])}{', ...' if len(found) > 6 else ''})"
    return line
