"""Inside a launched engine process: ``enable()`` for the life of the process, and the census.

Called by the launcher's ``sitecustomize`` once ``torch`` is imported (every Python process the
engine starts: ``PYTHONPATH`` survives ``fork``, ``spawn`` and ``subprocess``), or by vLLM through
the ``vllm.general_plugins`` entry point, which vLLM loads in every process it starts. Both are
no-ops unless the launcher set :data:`ENV_LAUNCH`, so installing pytest-invariance beside vLLM
changes nothing by itself. The census part of each process is written at exit, on SIGTERM (before
any handler the engine installs itself), after ``fork`` in the child (a fresh count) and every
:data:`ENV_FLUSH_S` seconds, so a process killed outright loses at most that much.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_LAUNCH = "INVARIANCE_LAUNCH"  # "1": this process tree runs under the reference kernels
ENV_CENSUS = "INVARIANCE_LAUNCH_CENSUS"  # the census file; each process writes FILE.parts/<pid>.json
ENV_FLUSH_S = "INVARIANCE_LAUNCH_FLUSH_S"  # seconds between periodic flushes (default 5)


@dataclass
class _State:
    pid: int
    census: Path | None
    started: str
    last_calls: int = -1


_state: _State | None = None
_flush_lock = threading.RLock()  # a SIGTERM may arrive while this thread flushes at exit
_set_handler = signal.signal  # the unwrapped one (``_flush_on_sigterm`` wraps signal.signal)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def active() -> bool:
    """Whether this process was activated (enable() entered by the launch hook)."""
    return _state is not None


def flush(reason: str) -> None:
    """Write this process's census part now (nothing without a census)."""
    st = _state
    if st is None or st.census is None:
        return
    from . import recorder
    from .census_file import parts_dir

    with _flush_lock:
        try:
            recorder.write_part(parts_dir(st.census) / f"{os.getpid()}.json", st.started, reason)
        except OSError as exc:  # a full disk or a removed folder must not take the engine down
            print(f"pytest-invariance launch: pid {os.getpid()}: census not written ({reason}): {exc}", file=sys.stderr)


def _periodic(every: float) -> None:
    from . import recorder

    while True:
        time.sleep(every)
        st = _state
        if st is None:
            return
        _, calls = recorder.snapshot()
        if calls and calls != st.last_calls:
            st.last_calls = calls
            flush("periodic")


def _flushing(handler: Any) -> Any:
    """``handler`` preceded by a flush; the default action re-raised after it."""

    def on_sigterm(signum: int, frame: Any) -> Any:
        flush("SIGTERM")
        if callable(handler):
            return handler(signum, frame)
        if handler == signal.SIG_IGN:
            return None
        _set_handler(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return None

    return on_sigterm


def _flush_on_sigterm() -> None:
    """Flush before whatever SIGTERM handler the process has now or installs later."""
    if threading.current_thread() is not threading.main_thread():
        return
    _set_handler(signal.SIGTERM, _flushing(signal.getsignal(signal.SIGTERM)))

    def install(signum: int, handler: Any) -> Any:
        if signum == signal.SIGTERM:
            handler = _flushing(handler)
        return _set_handler(signum, handler)

    signal.signal = install  # type: ignore[assignment]


def _start_flusher() -> None:
    every = float(os.environ.get(ENV_FLUSH_S) or 5)
    threading.Thread(target=_periodic, args=(every,), name="invariance-census-flush", daemon=True).start()


def _after_fork_in_child() -> None:
    from . import recorder

    if _state is None:
        return
    recorder.reset()
    _state.pid, _state.started, _state.last_calls = os.getpid(), _now(), -1
    _start_flusher()


def _flush_at_multiprocessing_exit(_: object) -> None:
    """A ``multiprocessing`` fork child ends in ``os._exit`` (no atexit): flush from its finalizers,
    which its bootstrap clears after the fork and runs at the end (hence registered again here)."""
    from multiprocessing import util

    util.Finalize(None, flush, args=("exit",), exitpriority=100)


def activate(source: str = "sitecustomize") -> bool:
    """Route this process's aten ops to the reference kernels until it exits, and start its census
    when :data:`ENV_CENSUS` names a file. False when not launched or already active."""
    global _state
    if os.environ.get(ENV_LAUNCH) != "1" or _state is not None:
        return False
    from pytest_invariance.reference_kernels import enable

    enable().__enter__()  # never exited: the process runs under the reference kernels to its end
    census = os.environ.get(ENV_CENSUS)
    _state = _State(os.getpid(), Path(census) if census else None, _now())
    if census:
        from . import recorder

        recorder.wrap_thread_run()
        recorder.enter_mode()
        atexit.register(flush, "exit")
        _flush_on_sigterm()
        os.register_at_fork(after_in_child=_after_fork_in_child)
        from multiprocessing import util

        util.register_after_fork(_state, _flush_at_multiprocessing_exit)
        _start_flusher()
    if os.environ.get("INVARIANCE_LAUNCH_VERBOSE") == "1":
        print(f"pytest-invariance launch: pid {os.getpid()} under the reference kernels ({source})", file=sys.stderr)
    return True


def vllm_plugin() -> None:
    """The ``vllm.general_plugins`` entry point: :func:`activate` where the launcher asked for it."""
    activate("vllm.general_plugins")
