"""Cost of the six newer families' reference kernels vs their stock paths, in one run.

Families: add-rmsnorm, rmsnorm-fp8-quant, fp8-block-gemm, int4-gemm, lora, linear-attention.
For each family, shape and token count: the reference's time and every stock's time measured in
the same process on the same inputs (CUDA: ``triton.testing.do_bench`` median over a ring of
inputs past L2; CPU: median of ``time.perf_counter`` over repeats), one ``perf`` record per
(family, implementation, M) with ``cost`` against the fastest stock, and a quick batch-size
verdict (sizes 1..129 on CUDA, 1..33 on CPU) of the implementation against the family's mutant.

    python benchmarks/bench_families.py --out "$OUT" [--device cuda|cpu] [--families a,b]

writes ``$OUT/bench_families.jsonl`` and prints one line per family and M last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

from _common import PerfWriter, bench_graph_ms, bench_ms, cost, quick_verdict, ring

FAMILIES = ("add-rmsnorm", "rmsnorm-fp8-quant", "fp8-block-gemm", "int4-gemm", "lora", "linear-attention")
SIZES = {"cuda": (1, 16, 256, 4096), "cpu": (1, 16, 64)}
VERDICT_SIZES = (1, 2, 3, 8, 9, 16, 17, 33, 64, 65, 128, 129, 255, 256, 257)  # up to each family's pool


def cpu_ms(fn: Callable, inputs: list, repeats: int = 7) -> float:
    times = []
    for r in range(repeats):
        x = inputs[r % len(inputs)]
        t0 = time.perf_counter()
        fn(*x)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def graph_ms(family: str, name: str, fn: Callable, inputs: list) -> float | None:
    """CUDA-graph time, or None (said in one line) where ``fn`` cannot be captured."""
    try:
        return bench_graph_ms(fn, inputs)
    except RuntimeError as exc:
        print(f"bench_families: {family} {name}: no CUDA-graph time: {str(exc).splitlines()[0][:120]}")
        return None


def cases(device: str):
    """family -> (shape, make(m, seed) -> args, reference, {stock: fn}, rows(fn) -> rows_fn, pool(seed), mutant)."""
    import torch
    from pytest_invariance.oracles.inputs import rows_pool, wide_spread
    from pytest_invariance.reference_kernels import fp8_block, fused_norm, int4, linear_attention, lora
    from pytest_invariance.reference_kernels.mutants import fused_norm_mutants as fnm
    from pytest_invariance.reference_kernels.mutants import quant_gemm_mutants as qgm
    from pytest_invariance.reference_kernels.mutants.lora_segment import lora_segment_splitk
    from pytest_invariance.reference_kernels.mutants.scan_chunk import scan_chunk_by_batch

    big = device == "cuda"
    bf = torch.bfloat16
    h = 4096 if big else 512
    w = wide_spread((h,), 7, bf, decades=1.0, device=device)
    out = {}

    def norm_rows(fn):
        return lambda r: torch.cat(fn(r[:, :h].clone(), r[:, h:].clone(), w, 1e-6), 1)

    out["add-rmsnorm"] = ({"H": h}, lambda m, s: (rows_pool(m, (h,), s, bf, device), rows_pool(m, (h,), s + 1, bf, device), w, 1e-6),
                          fused_norm.add_rms_norm, {"torch": fused_norm.stock_add_rms_norm}, norm_rows,
                          lambda s: rows_pool(257, (2 * h,), s, bf, device), fnm.add_rmsnorm_block_switch)  # fmt: skip

    def q_rows(fn):
        def run(r):
            q, sc = fn(r, w, 1e-6, None)
            return torch.cat([q.float(), sc.reshape(-1, 1).expand(r.shape[0], 1)], 1)

        return run

    out["rmsnorm-fp8-quant"] = ({"H": h, "scale": "per-token"}, lambda m, s: (rows_pool(m, (h,), s, bf, device), w, 1e-6, None),
                                fused_norm.rms_norm_fp8_quant, {"torch": fused_norm.stock_rms_norm_fp8_quant}, q_rows,
                                lambda s: rows_pool(129, (h,), s, bf, device), fnm.rmsnorm_fp8_tensor_dynamic)  # fmt: skip
    k, n = (7168, 1536) if big else (512, 256)
    wq, ws = fp8_block.quantize_weight_blocks(wide_spread((n, k), 3, device=device))
    stocks = {"torch-dequant": fp8_block.stock_dequant_linear}
    if fp8_block.scaled_mm_blockwise_unavailable(device) is None:
        stocks["torch-scaled-mm"] = fp8_block.stock_scaled_mm_blockwise
    out["fp8-block-gemm"] = ({"K": k, "N": n}, lambda m, s: (rows_pool(m, (k,), s, bf, device), wq, ws),
                             fp8_block.fp8_block_linear, stocks, lambda fn: lambda r: fn(r, wq, ws),
                             lambda s: rows_pool(129, (k,), s, bf, device), qgm.fp8_block_splitk)  # fmt: skip
    k4, n4 = (4096, 6144) if big else (512, 256)
    qw = int4.quantize_int4(wide_spread((n4, k4), 4, device=device))
    out["int4-gemm"] = ({"K": k4, "N": n4}, lambda m, s: (rows_pool(m, (k4,), s, bf, device), *qw),
                        int4.int4_linear, {"torch-dequant": int4.stock_dequant_linear, "torch-int4pack": int4.stock_int4pack},
                        lambda fn: lambda r: fn(r, *qw), lambda s: rows_pool(129, (k4,), s, bf, device),
                        qgm.int4_splitk_by_batch)  # fmt: skip
    hl, nl, rl, ll = (4096, 4096, 16, 8) if big else (256, 256, 16, 4)
    la = (wide_spread((ll, rl, hl), 5, bf, device=device) * hl**-0.5, wide_spread((ll, nl, rl), 6, bf, device=device) * rl**-0.5)

    def lora_args(m, s):
        ids = torch.randint(-1, ll, (m,), generator=torch.Generator().manual_seed(s)).to(device)
        return (rows_pool(m, (hl,), s, bf, device), rows_pool(m, (nl,), s + 1, bf, device), *la, ids, 0.5)

    def lora_rows(fn):
        return lambda r: fn(r[:, :hl].bfloat16(), r[:, hl:-1].bfloat16(), *la, r[:, -1].long(), 0.5)

    def lora_pool(s):
        ids = torch.randint(-1, ll, (129, 1), generator=torch.Generator().manual_seed(s)).float().to(device)
        return torch.cat([rows_pool(129, (hl + nl,), s, device=device), ids], 1)

    out["lora"] = ({"H": hl, "N": nl, "R": rl, "L": ll}, lora_args, lora.lora_apply,
                   {"torch-adapter-loop": lora.stock_adapter_loop, "torch-bgmv": lora.stock_bgmv}, lora_rows, lora_pool,
                   lora_segment_splitk)  # fmt: skip
    t, hh, d = (512, 16, 128) if big else (64, 2, 16)

    def scan_args(m, s):
        g = torch.Generator(device=device).manual_seed(s)
        mk = lambda *sh: torch.randn(sh, generator=g, device=device)  # noqa: E731
        return (mk(m, t, hh, d).to(bf), (mk(m, t, hh, d) * d**-0.5).to(bf), mk(m, t, hh, d).to(bf),
                -(torch.rand((m, t, hh), generator=g, device=device) * 0.29 + 0.01))  # fmt: skip

    def scan_rows(fn):
        def run(r):
            b = r.shape[0]
            q, kk, v, gg = r[:, : t * hh * d], r[:, t * hh * d : 2 * t * hh * d], r[:, 2 * t * hh * d : 3 * t * hh * d], r[:, 3 * t * hh * d :]
            sh = (b, t, hh, d)
            o, st = fn(q.reshape(sh).bfloat16(), kk.reshape(sh).bfloat16(), v.reshape(sh).bfloat16(), gg.reshape(b, t, hh))
            return torch.cat([o.float().reshape(b, -1), st.reshape(b, -1)], 1)

        return run

    def scan_pool(s):
        q, kk, v, gg = scan_args(9, s)
        return torch.cat([q.float().reshape(9, -1), kk.float().reshape(9, -1), v.float().reshape(9, -1), gg.reshape(9, -1)], 1)

    out["linear-attention"] = ({"T": t, "H": hh, "D": d, "M_is": "sequences"}, scan_args, linear_attention.scan,
                               {"torch-chunked": linear_attention.stock_chunked}, scan_rows, scan_pool, scan_chunk_by_batch)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--device", default=None, help="cuda (default where available) or cpu")
    ap.add_argument("--families", default=",".join(FAMILIES))
    args = ap.parse_args(argv)
    from functools import partial

    import torch
    from pytest_invariance.reference_kernels.device import library_refusal

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("bench_families: --device cuda but no CUDA device", file=sys.stderr)
        return 2
    writer = PerfWriter(args.out, "bench_families")
    table = []
    for family, (shape, make, ref, stocks, rows, pool, mutant) in cases(device).items():
        if family not in args.families.split(","):
            continue
        sizes = [s for s in VERDICT_SIZES if s <= pool(0).shape[0]]
        refused = {n: why for n, fn in stocks.items() if (why := library_refusal(partial(rows(fn), pool(0)[:1])))}
        for name, why in refused.items():  # the installed library refuses this stock: unsupported, not a crash
            print(f"bench_families: {family} {name} unsupported: {why}")
            writer.write(case=f"{family}[{name}]", family=family, implementation=name, verdict="unsupported",
                         evidence={"error": why}, quantization="bf16", dtype=torch.bfloat16, shape=shape, cost=None)  # fmt: skip
        stocks = {n: fn for n, fn in stocks.items() if n not in refused}
        verdicts = {name: quick_verdict(rows(fn), rows(mutant), [pool(0), pool(1)], sizes)
                    for name, fn in {"reference": ref, **stocks}.items()}  # fmt: skip
        for m in SIZES[device] if family != "linear-attention" else (1, 8, 64):
            inputs = [make(m, i) for i in range(8 if device == "cpu" else 1)]
            if device == "cuda":
                nbytes = sum(a.numel() * a.element_size() for a in inputs[0] if hasattr(a, "numel"))
                inputs = ring(lambda i, m=m, mk=make: mk(m, i), max(1, nbytes), cap=64)
                timer = bench_ms
            else:
                timer = cpu_ms
            impls = {"reference": ref, **stocks}
            times = {name: timer(fn, inputs) for name, fn in impls.items()}
            # under a CUDA graph (launch excluded), as engines replay decode steps
            graph = {name: graph_ms(family, name, fn, inputs) for name, fn in impls.items()} if device == "cuda" else {}
            fastest = min((n for n in stocks), key=lambda n: times[n])
            graphed = [n for n in stocks if graph.get(n) is not None]
            if graph.get("reference") is None or not graphed:
                graph = {}
            fastest_graph = min(graphed, key=lambda n: graph[n]) if graph else None
            for name, ms in times.items():
                v, ev, ctl = verdicts[name]
                writer.write(case=f"{family}[{name}-M{m}]", family=family, implementation=name, verdict=v, evidence=ev,
                             control=ctl, quantization="bf16", dtype=torch.bfloat16, shape={**shape, "M": m},
                             cost=cost(ms, times[fastest], fastest, method="do_bench median over a ring past L2"
                                       if device == "cuda" else "median of 7 perf_counter calls"),
                             extra={"stock_ms": {n: times[n] for n in stocks},
                                    **({"graph": cost(graph[name], graph[fastest_graph], fastest_graph,
                                                      method="CUDA graph replay, CUDA events, ring past L2"),
                                        "stock_graph_ms": {n: graph[n] for n in graphed}}
                                       if graph.get(name) is not None else {})})  # fmt: skip
            g = (graph["reference"], fastest_graph, graph[fastest_graph]) if graph else None
            table.append((family, m, times["reference"], fastest, times[fastest], verdicts["reference"][0], g))
    print(f"records: {writer.path}")
    print("ratio = fastest stock's time / the reference's (>= 1: the reference is faster); eager, and graph")
    print(f"{'family':<18}{'M':>6}{'ref ms':>10}  {'fastest stock':<18}{'ms':>9}{'ratio':>7}"
          f"{'graph ref':>11}  {'graph stock':<18}{'ms':>9}{'ratio':>7}  ref verdict")  # fmt: skip
    for family, m, r, name, s, v, g in table:
        gcols = f"{g[0]:>11.4f}  {g[1]:<18}{g[2]:>9.4f}{g[2] / g[0]:>7.2f}" if g else f"{'-':>11}  {'':<18}{'':>9}{'':>7}"
        print(f"{family:<18}{m:>6}{r:>10.4f}  {name:<18}{s:>9.4f}{s / r:>7.2f}{gcols}  {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
