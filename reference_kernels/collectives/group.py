"""Ranks that stay up: ``world`` spawned processes in one process group, each on its own queue.

Why a pool: spawning ranks and joining a process group costs seconds on a 2-core machine, and an
oracle calls its subject dozens of times, so the ranks are started once and each call only ships
the inputs. Every rank also joins subgroups of the first 1, 2, ... ranks, so one pool of 4 serves
TP1, TP2 and TP4 (ranks outside a call's group sit idle).

Every wait is bounded: start-up, each call (``call_timeout``; the group's own collective timeout is
twice that, so the caller's deadline fires first and a stuck rank still frees itself), and shutdown (a polite stop, then terminate, then kill). A rank that stalls, raises
or dies makes the call raise (``TimeoutError`` / ``RuntimeError``, one line naming the rank) and
closes the pool, since the group's state is then unknown; :meth:`RankPool.restart` brings up a
fresh one. Ranks bind 127.0.0.1 only (``GLOO_SOCKET_IFNAME=lo``, a file store, no TCP rendezvous)
and exit on their own when the process that started them is gone.

Backends: ``gloo`` (CPU tensors, the default) or ``nccl``: rank ``r`` owns ``cuda:r``, inputs still
travel as packed bytes and are moved to the rank's GPU in the rank, outputs come back to CPU
before packing. A pool's ``env`` is set in every rank before its process group starts, which is
the only time NCCL reads its variables (``nccl_configs`` names the engines' pinnings); an NCCL
pool always has NVLink multicast off.
"""

from __future__ import annotations

import inspect
import itertools
import multiprocessing as mp
import os
import queue
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta

import torch

Packed = tuple[str, tuple[int, ...], bytes]
POLL_S = 0.5  # how often an idle rank checks that its parent is alive
BACKENDS = ("gloo", "nccl")


def pack(t: torch.Tensor) -> Packed:
    """A tensor as (dtype, shape, bytes): plain pickles, no shared-memory file descriptors."""
    t = t.detach().contiguous()
    return str(t.dtype).removeprefix("torch."), tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes()


def unpack(p: Packed) -> torch.Tensor:
    dtype, shape, raw = p
    dt = getattr(torch, dtype)
    if not raw:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt).reshape(shape)


def _init_group(backend: str, rank: int, world: int, store: str, timeout_s: float):
    """Join the process group; for NCCL bind ``cuda:rank`` first. The rank's device (None: CPU)."""
    import torch.distributed as dist

    kw: dict = {}
    device = None
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        if "device_id" in inspect.signature(dist.init_process_group).parameters:
            kw["device_id"] = device  # eager communicator: a bad GPU fails at start, not mid-check
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s), **kw)  # fmt: skip
    return device


def _worker(rank: int, world: int, store: str, sizes: tuple[int, ...], timeout_s: float, inq, outq,
            backend: str = "gloo", env: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """One rank: join the group and its subgroups, then run ``fn(*args, group=...)`` per message."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ.update(env or {})  # before the group exists: NCCL reads its variables once, at init
    torch.set_num_threads(1)
    import torch.distributed as dist

    try:
        device = _init_group(backend, rank, world, store, timeout_s)
        # every rank creates every subgroup, in the same order (new_group is collective)
        groups = {w: dist.group.WORLD if w == world else dist.new_group(list(range(w))) for w in sizes}
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        outq.put(("ready", rank, False, f"{type(exc).__name__}: {exc}"))
        return
    outq.put(("ready", rank, True, None))
    parent = mp.parent_process()
    while True:
        try:
            msg = inq.get(timeout=POLL_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                break
            continue
        if msg is None:
            break
        task, fn, w, args = msg
        try:
            tensors = [unpack(a) if device is None else unpack(a).to(device) for a in args]
            out = fn(*tensors, group=groups[w])
            outq.put((task, rank, True, pack(out.cpu())))  # .cpu() waits for the GPU's work
        except Exception as exc:  # noqa: BLE001 - a kernel's error is the call's evidence
            outq.put((task, rank, False, f"{type(exc).__name__}: {exc}"))
    # no destroy_process_group(): it waits on the other ranks, and the process ends here anyway


class RankPool:
    """``world`` ranks of a gloo or NCCL group, with subgroups of the first ``w`` ranks for ``w`` in ``sizes``."""

    def __init__(
        self,
        world: int = 4,
        sizes: Sequence[int] = (1, 2, 4),
        *,
        start_timeout: float = 180.0,
        call_timeout: float = 30.0,
        backend: str = "gloo",
        env: Mapping[str, str] | None = None,
    ) -> None:
        if world < 1 or any(not 1 <= w <= world for w in sizes):
            raise ValueError(f"world sizes {list(sizes)} must lie in 1..{world}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        self.env = dict(env or {})
        if backend == "nccl":
            from .nccl_configs import ALWAYS

            gpus = torch.cuda.device_count()
            if world > gpus:
                raise ValueError(f"backend 'nccl' needs one GPU per rank: world size {world} > {gpus} CUDA device(s) here")
            self.env.update(ALWAYS)
        self.backend = backend
        self.world, self.sizes = world, tuple(sorted(set(sizes) | {world}))
        self.start_timeout, self.call_timeout = start_timeout, call_timeout
        self.closed: str | None = "not started"
        self._procs: list = []
        self._start()

    # -- lifecycle -----------------------------------------------------------------------------
    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self._dir = tempfile.mkdtemp(prefix="invariance-ranks-")
        store = os.path.join(self._dir, "store")
        self._inq = [ctx.Queue() for _ in range(self.world)]
        self._outq = ctx.Queue()
        self._tasks = itertools.count()
        self._procs = [
            ctx.Process(target=_worker, daemon=True, name=f"invariance-rank-{r}",
                        args=(r, self.world, store, self.sizes, 2 * self.call_timeout, self._inq[r], self._outq,
                              self.backend, self.env))
            for r in range(self.world)
        ]  # fmt: skip
        for p in self._procs:
            p.start()
        self.closed = None
        self._finalizer = weakref.finalize(self, _stop, self._procs, self._inq, self._dir)  # also runs at exit
        ready = self._collect("ready", range(self.world), self.start_timeout, "start")
        bad = {r: v for r, v in ready.items() if v[0] is False}
        if bad:
            r, (_, err) = min(bad.items())
            self.close(f"rank {r} could not join the group: {err}", failed=True)
            raise RuntimeError(f"rank {r} could not join the {self.backend} group: {err}")

    def restart(self) -> RankPool:
        """Stop whatever is left and start fresh ranks (after a call closed the pool)."""
        self.close("restarted")
        self._start()
        return self

    def close(self, reason: str = "closed", *, failed: bool = False) -> None:
        """Stop every rank within a few seconds (at once after a failure: no polite stop); idempotent."""
        if self.closed is None:
            self.closed = reason
        fin = getattr(self, "_finalizer", None)
        if fin is not None and fin.detach() is not None:
            _stop(self._procs, self._inq, self._dir, polite=not failed)

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls ---------------------------------------------------------------------------------
    def _collect(self, task: object, ranks: Sequence[int] | range, timeout: float, what: str) -> dict:
        """Results of ``task`` by rank, until all came, one failed, a rank died or time ran out."""
        want, got = set(ranks), {}
        deadline = time.monotonic() + timeout
        while want - set(got):
            left = deadline - time.monotonic()
            dead = [p.name for r, p in enumerate(self._procs) if r in want - set(got) and not p.is_alive()]
            if dead or left <= 0:
                missing = sorted(want - set(got))
                why = f"rank(s) {missing} {'died' if dead else 'gave no result'} within {timeout:g} s ({what})"
                self.close(why, failed=True)
                raise TimeoutError(why) if not dead else RuntimeError(why)
            try:
                t, rank, ok, payload = self._outq.get(timeout=min(left, POLL_S))
            except queue.Empty:
                continue
            if t == task:
                got[rank] = (ok, payload)
                if not ok:  # one rank failed: the others may wait in the collective forever
                    break
        return got

    def run(self, fn: Callable, world_size: int, per_rank: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
        """``fn(*per_rank[r], group=G)`` on ranks ``0..world_size-1`` at once; their outputs by rank.

        ``fn`` must pickle (a module-level function or a ``functools.partial`` of one)."""
        if self.closed is not None:
            raise RuntimeError(f"rank pool is closed ({self.closed})")
        if world_size not in self.sizes or len(per_rank) != world_size:
            raise ValueError(f"world size {world_size} with {len(per_rank)} inputs; pool has sizes {self.sizes}")
        task = next(self._tasks)
        for r, args in enumerate(per_rank):
            self._inq[r].put((task, fn, world_size, [pack(a) for a in args]))
        got = self._collect(task, range(world_size), self.call_timeout, getattr(fn, "__name__", repr(fn)))
        errors = {r: p for r, (ok, p) in got.items() if not ok}
        if errors:
            r = min(errors)
            self.close(f"rank {r} raised", failed=True)
            raise RuntimeError(f"rank {r} of {world_size}: {errors[r]}")
        return [unpack(got[r][1]) for r in range(world_size)]


def _stop(procs: list, inqs: list, tmpdir: str, polite: bool = True) -> None:
    """Ask the ranks to stop (``polite``), then terminate, then kill whatever is left; bounded."""
    if polite:
        for q, p in zip(inqs, procs, strict=True):
            if p.is_alive():
                try:
                    q.put(None)
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + 5.0
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(2.0)
        if p.is_alive():
            p.kill()
            p.join(2.0)
    for q in inqs:
        q.cancel_join_thread()
        q.close()
    shutil.rmtree(tmpdir, ignore_errors=True)


def shard_rows(rows: torch.Tensor, world_size: int) -> list[list[torch.Tensor]]:
    """A global ``rows[M, P, H]`` split over ranks: rank ``r`` gets parts ``[P/w r, P/w (r+1))`` as
    ``[P/w, M, H]`` (contributions contiguous by rank, so global order is rank-major)."""
    p = rows.shape[1]
    if p % world_size:
        raise ValueError(f"{p} parts do not split evenly over {world_size} ranks")
    k = p // world_size
    return [[rows[:, r * k : (r + 1) * k].transpose(0, 1).contiguous()] for r in range(world_size)]


def same_on_every_rank(outs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Rank 0's output, after checking every rank got the same bits (ranks that disagree would
    drive a TP model's shards apart, so that is an error of the collective, not a verdict)."""
    first = outs[0].contiguous().view(torch.uint8)
    for r, o in enumerate(outs[1:], 1):
        if o.shape != outs[0].shape or not torch.equal(first, o.contiguous().view(torch.uint8)):
            raise RuntimeError(f"the all-reduce gave rank {r} other bits than rank 0")
    return outs[0]


def rows_fn(pool: RankPool, fn: Callable | Callable[[], Callable], world_size: int, *, fresh: bool = False):
    """``rows[M, P, H] -> [M, H]``: ``fn`` all-reducing the sharded rows at ``world_size``.

    With ``fresh``, ``fn`` is a factory called once per call (a per-call control)."""

    def run(rows: torch.Tensor) -> torch.Tensor:
        return same_on_every_rank(pool.run(fn() if fresh else fn, world_size, shard_rows(rows, world_size)))

    return run
