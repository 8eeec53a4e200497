"""One GPU per pytest-xdist worker: worker ``gw<i>`` runs on GPU ``i mod count``.

Why: without it every worker of ``pytest -n 8`` on an 8-GPU host runs on ``cuda:0`` (seven GPUs
idle, one oversubscribed), and the records cannot say which GPU measured them. The worker id
comes from pytest-xdist (``PYTEST_XDIST_WORKER``); ``--invariance-gpus 0,2`` names the GPUs to
spread over instead (worker i takes the list's entry i mod its length). Sharding across hosts is
pytest-xdist's or pytest-split's job, not ours (docs/guide/ci-sharding.md).

The choice is made on first use (the fixture's ``device``, the fingerprint, a ``gpu`` test's
setup), so importing the plugin never imports torch.
"""

from __future__ import annotations

import functools
import os
import re
import sys

_WORKER = re.compile(r"gw(\d+)$")
_explicit: tuple[int, ...] | None = None


class GpuChoiceError(ValueError):
    """An ``--invariance-gpus`` list that cannot be used (one line)."""


def parse_gpus(text: str) -> tuple[int, ...]:
    """``"0,2,5"`` -> ``(0, 2, 5)``; raises :class:`GpuChoiceError` naming the bad entry."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part.isdigit():
            raise GpuChoiceError(f"--invariance-gpus: {part!r} is not a GPU index (expected e.g. 0,1,3)")
        out.append(int(part))
    if len(set(out)) != len(out):
        raise GpuChoiceError(f"--invariance-gpus: {text!r} names a GPU twice")
    return tuple(out)


def worker_index(worker_id: str | None) -> int:
    """``gw3`` -> 3; the controller or a run without xdist is worker 0."""
    m = _WORKER.match(worker_id or "")
    return int(m.group(1)) if m else 0


def assign_gpu(worker_id: str | None, count: int, explicit: tuple[int, ...] | None = None) -> int | None:
    """The GPU index for this worker: the explicit list's entry i mod its length, else i mod
    ``count``; None where there is no GPU. An explicit index past ``count`` is refused."""
    i = worker_index(worker_id)
    if explicit:
        gpu = explicit[i % len(explicit)]
        if count and gpu >= count:
            raise GpuChoiceError(f"--invariance-gpus: GPU {gpu} does not exist (this host has {count})")
        return gpu
    return i % count if count > 0 else None


def configure(explicit: tuple[int, ...] | None) -> None:
    """Set by the plugin from ``--invariance-gpus`` (None: spread over every visible GPU)."""
    global _explicit
    _explicit = explicit
    pinned_gpu.cache_clear()


def device_count() -> int:
    """Visible CUDA devices (0 without torch or CUDA). Tests of the pinning replace this."""
    from importlib.util import find_spec

    if find_spec("torch") is None:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@functools.lru_cache(maxsize=1)
def pinned_gpu() -> int | None:
    """This process's GPU, made the current CUDA device on first call (None: no GPU)."""
    gpu = assign_gpu(os.environ.get("PYTEST_XDIST_WORKER"), device_count(), _explicit)
    torch = sys.modules.get("torch")  # counting real GPUs imported it; a count without torch has no device
    if gpu is not None and torch is not None and torch.cuda.is_available():
        torch.cuda.set_device(gpu)
    return gpu
