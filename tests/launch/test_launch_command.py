"""``pytest-invariance launch``: enable() and the census in every process of the command's tree.

Each test starts real child processes (a Python "engine" importing torch), so they are few: one
covers a thread, a ``spawn`` child, a ``fork`` child and a custom op; one SIGTERM; the rest are
usage errors that never start torch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

LAUNCH = [sys.executable, "-m", "pytest_invariance.cli", "launch"]
ENGINE = textwrap.dedent(
    """
    import multiprocessing as mp, sys, threading, time
    import torch

    @torch.library.custom_op("launch_tests::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def work(tag):
        from pytest_invariance.reference_kernels import is_enabled
        a = torch.randn(5, 64)
        torch.mm(a, a.t())                                        # routed: reference
        torch.mm(torch.ones(3, 3, dtype=torch.long), torch.ones(3, 3, dtype=torch.long))  # declined
        torch.softmax(a, -1)                                      # unrouted
        a.view(-1).clone()                                        # exact
        if tag == "main":
            twice(a)                                              # a custom op: unrouted
        print(tag, "enabled", is_enabled(), flush=True)

    def child(tag):
        work(tag)

    if __name__ == "__main__":
        t = threading.Thread(target=work, args=("thread",)); t.start(); t.join()
        for method in ("spawn", "fork"):
            p = mp.get_context(method).Process(target=child, args=(method,)); p.start(); p.join()
        work("main")
        if len(sys.argv) > 1:
            open(sys.argv[1], "w").close()   # ready: the parent may send SIGTERM now
            time.sleep(120)
    """
)


def _engine(tmp_path: Path) -> Path:
    path = tmp_path / "engine.py"
    path.write_text(ENGINE)
    return path


def _ops(census: dict) -> dict[tuple[str, str], int]:
    return {(r["op"], r["status"]): r["calls"] for r in census["ops"]}


def test_every_process_and_thread_runs_under_the_reference_kernels_with_a_census(tmp_path: Path) -> None:
    census = tmp_path / "census.json"
    out = subprocess.run([*LAUNCH, "--census", str(census), "--", sys.executable, str(_engine(tmp_path))],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    for tag in ("thread", "spawn", "fork", "main"):
        assert f"{tag} enabled True" in out.stdout
    data = json.loads(census.read_text())
    ops = _ops(data)
    assert ops[("aten.mm.default", "reference")] == 4 and ops[("aten.mm.default", "declined")] == 4
    assert ops[("aten._softmax.default", "unrouted")] == 4
    assert ops[("launch_tests.twice.default", "unrouted")] == 1  # named, never skipped
    assert ops[("aten.clone.default", "exact")] == 4
    calls = sorted(p["calls"] for p in data["processes"] if p["calls"])
    assert len(calls) == 3, data["processes"]  # the launched process, its spawn child, its fork child
    assert "unrouted: 3 (aten._softmax.default, aten.randn.default, launch_tests.twice.default)" in out.stderr


def test_sigterm_flushes_the_census_and_exits_with_the_signal_status(tmp_path: Path) -> None:
    census, ready = tmp_path / "census.json", tmp_path / "ready"
    proc = subprocess.Popen([*LAUNCH, "--census", str(census), "--", sys.executable, str(_engine(tmp_path)), str(ready)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)  # fmt: skip
    deadline = time.monotonic() + 600
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ready.exists(), proc.communicate(timeout=60)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    data = json.loads(census.read_text())
    assert data["exit_status"] == 128 + signal.SIGTERM
    main = [p for p in data["processes"] if p["flush_reason"] == "SIGTERM"]
    assert len(main) == 1 and main[0]["calls"] > 0
    assert _ops(data)[("aten.mm.default", "reference")] == 4
    assert not census.with_name("census.json.parts").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "no command given"),
        (["--", "no-such-engine-xyz"], "'no-such-engine-xyz': no such command"),
        (["--census", ".", "--", "true"], "is a directory"),
    ],
)
def test_bad_command_lines_are_one_line_and_status_2(args: list[str], says: str, tmp_path: Path) -> None:
    out = subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_command_status_comes_back_and_a_torch_free_command_writes_an_empty_census(tmp_path: Path) -> None:
    census = tmp_path / "c.json"
    out = subprocess.run([*LAUNCH, "--census", str(census), "--", sys.executable, "-c", "raise SystemExit(3)"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 3
    data = json.loads(census.read_text())
    assert data["exit_status"] == 3 and data["ops"] == [] and data["processes"] == []


def test_the_hooks_do_nothing_unless_launched() -> None:
    """Installing pytest-invariance beside vLLM must not change vLLM: the plugin needs the launcher."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVARIANCE_LAUNCH")}
    code = ("from pytest_invariance.launch import hook; hook.vllm_plugin(); "
            "from pytest_invariance.reference_kernels import is_enabled; print(hook.active(), is_enabled())")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]
