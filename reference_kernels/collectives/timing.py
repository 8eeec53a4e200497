"""Rank-side timing of one ``allreduce`` implementation: what ``benchmarks/bench_allreduce.py`` ships.

The message is made on the rank's GPU from a seed (a 65536 x 4096 bf16 message is 512 MiB: too
large to pickle through the pool), the ranks are aligned by a barrier before every timed call, and
each call is bracketed by CUDA events on the rank's stream. The rank returns its per-call
milliseconds; the caller takes the maximum over ranks (a collective ends when its slowest rank does).
The message lives where the pool put the rank's input (``cuda:r`` on NCCL ranks); on gloo ranks
(CPU) the clock is ``time.perf_counter``, which is what the CPU test of this function runs.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


def time_all_reduce(where: torch.Tensor, group: object = None, *, implementation: str, tokens: int, hidden: int,
                    dtype: str = "bfloat16", iters: int = 20, warmup: int = 5, seed: int = 0) -> torch.Tensor:  # fmt: skip
    """Milliseconds of each of ``iters`` calls of ``implementation`` on a ``[1, tokens, hidden]`` message."""
    from ..catalogue import implementation as find

    fn = find("allreduce", implementation)
    dev = where.device
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed + dist.get_rank(group))
    parts = torch.randn((1, tokens, hidden), generator=gen, device=dev).to(getattr(torch, dtype))
    for _ in range(warmup):
        fn(parts, group)
    times = []
    for _ in range(iters):
        dist.barrier(group=group)
        times.append(_call_ms(fn, parts, group))
    return torch.tensor(times, dtype=torch.float64)


def _call_ms(fn, parts: torch.Tensor, group: object) -> float:
    """One call's milliseconds: CUDA events on the current stream, or the host clock on CPU."""
    if parts.device.type != "cuda":
        t0 = time.perf_counter()
        fn(parts, group)
        return (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize(parts.device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn(parts, group)
    end.record()
    end.synchronize()
    return start.elapsed_time(end)
