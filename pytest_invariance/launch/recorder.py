"""The census recorder inside an engine process: every aten and custom op call, counted.

Why a dispatch mode per thread: ``TorchDispatchMode`` sees every op the dispatcher runs for a
Python caller, aten and ``torch.ops.<ns>.*`` alike, after composite decomposition, and it does
not see the ops a reference kernel calls inside itself; so what it counts is what the engine
asked for. The mode stack is per thread, and engines compute on threads of their own
(``transformers serve``'s continuous-batching loop), so :func:`wrap_thread_run` enters a mode in
every thread started after activation. Counts stay per thread (no lock on the hot path) and are
summed when the part is written.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

from pytest_invariance.localize.trace import tensors

from .census_file import SCHEMA, merge_ops, write_atomic
from .classify import routed_name, status_of

_tables: list[dict] = []  # one {key: calls} per thread that recorded
_tables_lock = threading.Lock()


class CensusMode(TorchDispatchMode):
    """Counts calls per (op, status, device, input shapes, dtypes) into this thread's table."""

    def __init__(self) -> None:
        super().__init__()
        self.table: dict[tuple, list] = {}  # key -> [calls, first, last] (epoch seconds)
        with _tables_lock:
            _tables.append(self.table)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from pytest_invariance.reference_kernels import mode

        kwargs = kwargs or {}
        name = str(func)
        out = func(*args, **kwargs)
        declined = mode.declined() if routed_name(name) is not None else False
        ts = tensors((args, {k: v for k, v in kwargs.items() if k != "out"}))
        shapes = tuple(tuple(t.shape) for t in ts)
        if any(type(d) is not int for sh in shapes for d in sh):
            return out  # symbolic sizes: torch.compile tracing (fake tensors), not a call the engine ran
        key = (name, status_of(name, args, kwargs, declined), ts[0].device.type if ts else "-",
               shapes, tuple(str(t.dtype).removeprefix("torch.") for t in ts))  # fmt: skip
        now = time.time()
        seen = self.table.get(key)
        if seen is None:
            self.table[key] = [1, now, now]
        else:
            seen[0] += 1
            seen[2] = now
        return out


def _rows(table: dict[tuple, list]) -> list[dict]:
    rows: dict[tuple[str, str], dict] = {}
    for (name, status, device, shapes, dtypes), (n, first, last) in list(table.items()):
        row = rows.setdefault((name, status), {"op": name, "status": status, "calls": 0, "shapes": [],
                                               "first": first, "last": last})  # fmt: skip
        row["calls"] += n
        row["first"], row["last"] = min(row["first"], first), max(row["last"], last)
        row["shapes"].append({"in": [list(s) for s in shapes], "dtypes": list(dtypes), "device": device, "calls": n})
    return list(rows.values())


def snapshot() -> tuple[list[dict], int]:
    """(op rows, total calls) summed over every thread's table."""
    with _tables_lock:
        tables = [{k: list(v) for k, v in t.copy().items()} for t in _tables]
    return merge_ops([_rows(t) for t in tables]), sum(v[0] for t in tables for v in t.values())


def reset() -> None:
    """Forget every table (a forked child starts its own census, not a copy of its parent's)."""
    with _tables_lock:
        for t in _tables:
            t.clear()


def write_part(path: Any, started: str, reason: str) -> None:
    ops, total = snapshot()
    write_atomic(path, {"schema": SCHEMA, "pid": os.getpid(), "argv": sys.argv[:8], "started": started,
                        "flushed": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "flush_reason": reason, "calls": total,
                        "ops": ops})  # fmt: skip


def enter_mode() -> CensusMode:
    """A census mode entered on the calling thread for the rest of its life."""
    m = CensusMode()
    m.__enter__()
    return m


def wrap_thread_run() -> None:
    """Make every thread started from now on record into a census mode of its own."""
    original = threading.Thread.__init__

    def __init__(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        run = self.run

        def run_recorded() -> None:
            enter_mode()
            run()

        self.run = run_recorded  # type: ignore[method-assign]

    threading.Thread.__init__ = __init__  # type: ignore[method-assign]
