"""Host cost of one eager call: reference kernels (planned launch, and the JIT launch they replace)
against the stock op, at shapes so small that the GPU finishes before the host issues the next call.

A back-to-back loop of eager calls measures max(host, GPU) per call; at these shapes the GPU part
is a few microseconds, so the figure is the host's: what an eager caller
(``reference_kernels.enable()``, the engine's prefill) pays per op before the kernel runs. CUDA only.

    python benchmarks/bench_launch.py   # writes $OUT/bench_launch.jsonl, prints a table last
"""

from __future__ import annotations

import os
import sys

import torch
from _common import PerfWriter, cost


def _host_ms(fn, calls: int = 2000, repeats: int = 5) -> float:
    """Milliseconds per call of ``calls`` back-to-back eager calls, synchronized once at the end: the
    throughput of eager calls, max(host, GPU) per call. Median of ``repeats``. (do_bench is not used
    here: it zeroes a 256 MB buffer before each call, and a call's host work hides behind that memset
    or not, depending on its length, which makes host-bound figures jump between runs.)"""
    import statistics
    import time

    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) / calls * 1e3)
    return statistics.median(times)


def _profile(fn, calls: int = 3000) -> None:
    """Where an eager call's host time goes: cProfile over back-to-back calls, top entries by own time."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    torch.cuda.synchronize()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


def main() -> int:
    if not torch.cuda.is_available():
        print("bench_launch: CUDA is required", file=sys.stderr)
        return 2
    import torch.nn.functional as F
    from pytest_invariance.reference_kernels import attention, rowops
    from pytest_invariance.reference_kernels.matmul import linear
    from pytest_invariance.reference_kernels.matmul_triton import bmm_triton, pick_config

    dev = "cuda"
    bf = torch.bfloat16
    x = torch.randn(1, 256, device=dev).to(bf)
    w = torch.randn(256, 256, device=dev).to(bf)
    x64 = torch.randn(8, 256, device=dev).to(bf)
    cfg = pick_config(1, 256, 256, bf, x.device, False)
    # config= skips the plan: the per-call JIT launch of the same kernel, as before plans.
    jit_linear = lambda a, b: bmm_triton(a[None], b.t()[None], config=cfg)[0]  # noqa: E731
    nw = torch.ones(256, device=dev, dtype=bf)
    q = torch.randn(1, 32, 128, device=dev).to(bf)
    kc = torch.randn(4, 16, 8, 128, device=dev).to(bf)
    vc = torch.randn(4, 16, 8, 128, device=dev).to(bf)
    bt = torch.arange(4, device=dev, dtype=torch.int32)[None]
    sl = torch.tensor([40], device=dev, dtype=torch.int32)
    qs = q.transpose(0, 1)[None].expand(1, 32, 1, 128)
    ks = kc.view(-1, 8, 128)[:40].transpose(0, 1).repeat_interleave(4, 0)[None]
    cases = [
        ("linear M1 K256 N256", "matmul", lambda: linear(x, w), lambda: F.linear(x, w), "F.linear (cuBLAS)",
         {"jit": lambda: jit_linear(x, w)}),
        ("linear M8 K256 N256", "matmul", lambda: linear(x64, w), lambda: F.linear(x64, w), "F.linear (cuBLAS)", {}),
        ("rms_norm M8 N256", "rmsnorm", lambda: rowops.rms_norm(x64, nw, 1e-5),
         lambda: F.rms_norm(x64, (256,), nw, 1e-5), "F.rms_norm", {}),
        ("decode B1 KV40", "attention-decode", lambda: attention.decode_paged(q, kc, vc, bt, sl),
         lambda: F.scaled_dot_product_attention(qs, ks, ks), "SDPA (dense, no paging)", {}),
    ]  # fmt: skip
    writer = PerfWriter(os.environ.get("OUT", "out"), "bench_launch")
    rows = []
    for name, family, ref, stock, stock_name, more in cases:
        ref(), stock()
        torch.cuda.synchronize()
        r_ms, s_ms = _host_ms(ref), _host_ms(stock)
        extra = {k: _host_ms(f) * 1e3 for k, f in more.items()}
        writer.write(case=f"launch[{name}]", family=family, implementation="reference", verdict="incomplete",
                     quantization="bf16", dtype="bfloat16", shape={"case": name},
                     evidence={"note": "host cost per eager call (GPU work negligible at this shape); no "
                               "invariance check here: the suites' records carry these kernels' verdicts"},
                     cost=cost(r_ms, s_ms, stock_name, method="2000 back-to-back eager calls, one sync, median of 5",
                               **{f"{k}_us": round(v, 2) for k, v in extra.items()}))  # fmt: skip
        rows.append((name, r_ms * 1e3, s_ms * 1e3, extra))
    _profile(lambda: linear(x, w))
    print(f"{'case':<24}{'ref us':>9}{'stock us':>10}{'ratio':>7}  other")
    for name, r, s, extra in rows:
        print(f"{name:<24}{r:>9.1f}{s:>10.1f}{s / r:>7.2f}  " + " ".join(f"{k}={v:.1f}us" for k, v in extra.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
