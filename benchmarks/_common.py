"""Shared pieces of the GPU benchmarks: timing past L2, a quick verdict, perf records.

Every benchmark reports the reference kernel's time as a ratio to the stock
kernel measured in the same run, and carries an honest invariance verdict
next to the cost, so a fast-but-variant kernel can never look like a win.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence

L2_RING_BYTES = 4 * 64 * 2**20  # > 4x the H200's 50 MB L2
QUICK_SIZES = (1, 2, 3, 7, 8, 9, 31, 32, 33, 64, 65, 128, 129)


def ring(make: Callable[[int], object], bytes_per_input: int, cap: int = 1024) -> list:
    """Enough distinct inputs that cycling through them defeats L2 reuse."""
    n = max(2, -(-L2_RING_BYTES // max(1, bytes_per_input)))
    return [make(i) for i in range(min(n, cap))]


def bench_ms(fn: Callable, inputs: Sequence, warmup: int = 25, rep: int = 100) -> float:
    """Median milliseconds (triton.testing.do_bench) of ``fn`` over rotating ``inputs``."""
    from triton.testing import do_bench

    it = iter(range(10**12))

    def call():
        x = inputs[next(it) % len(inputs)]
        return fn(*x) if isinstance(x, tuple) else fn(x)

    return float(do_bench(call, warmup=warmup, rep=rep, return_mode="median"))


def bench_graph_ms(fn: Callable, inputs: Sequence, replays: int = 30) -> float:
    """Median GPU milliseconds per call with launch overhead excluded.

    One CUDA graph calls ``fn`` once on every ring input (so L2 reuse is still
    defeated); the graph is replayed and timed with CUDA events. Decode-shaped
    GEMMs take ~10-50 us, about what a Python launch costs, so eager timing
    measures the launcher rather than the bandwidth the kernel reaches. Serving
    engines replay decode steps from CUDA graphs for the same reason.
    """
    import statistics

    import torch

    def call(x):
        return fn(*x) if isinstance(x, tuple) else fn(x)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up outside the capture
        for x in inputs[:3]:
            call(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for x in inputs:
            call(x)
    graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / len(inputs))
    del graph
    return float(statistics.median(times))


def quick_verdict(fn: Callable, mutant: Callable, rows, sizes: Sequence[int] = QUICK_SIZES):
    """Batch-size verdict of ``fn`` with ``mutant`` as the positive control: (verdict, evidence, control).

    ``rows`` is one tensor (one trial) or a list of them (one trial each, both
    sides on the same inputs): fp32 row reductions need several trials before
    a split-sum control shows its divergence.
    """
    from pytest_invariance.oracles.batch import batch_size_oracle
    from pytest_invariance.oracles.verdict import decide

    pools = list(rows) if isinstance(rows, (list, tuple)) else [rows]
    sizes = [s for s in sizes if s <= min(p.shape[0] for p in pools)]
    res = ctl = None
    for t, pool in enumerate(pools):
        res = batch_size_oracle(fn, pool, sizes, trial=t, result=res)
        ctl = batch_size_oracle(mutant, pool, sizes, trial=t, result=ctl)
    control = {
        "name": getattr(mutant, "__name__", "mutant"),
        "diverged": ctl.diverged,
        "evidence": ctl.evidence(),
    }
    return decide(res.diverged, ctl.diverged), res.evidence(), control


def cost(ms: float, stock_ms: float, stock: str, **more: object) -> dict:
    """``ratio`` = stock time / this time: above 1 is faster than stock."""
    return {
        "ratio": round(stock_ms / ms, 4),
        "implementation_ms": ms,
        "stock_ms": stock_ms,
        "stock": stock,
        "method": "triton.testing.do_bench median, inputs rotated past L2",
        **more,
    }


class PerfWriter:
    """Appends complete perf records (schema of pytest_invariance.records) to OUT/<name>.jsonl."""

    def __init__(self, out_dir: str, name: str) -> None:
        from pytest_invariance import hardware
        from pytest_invariance.records import new_run_id

        os.makedirs(out_dir, exist_ok=True)
        self.path = os.path.join(out_dir, f"{name}.jsonl")
        self.name = name
        self.run_id = new_run_id()
        self.fp = hardware.fingerprint()

    def write(self, *, case: str, **fields: object) -> dict:
        from pytest_invariance.records import make_record

        rec = make_record(
            run_id=self.run_id,
            fingerprint=self.fp,
            oracle="perf",
            nodeid=f"benchmarks/{self.name}.py::{case}",
            **fields,
        )
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
        return rec
