"""Cost of the reference GEMMs vs cuBLAS / ``torch._scaled_mm``, measured in the same run (CUDA).

Cases: bf16 and fp16 at M=N=K=8192 (goal: reference >= 0.90x cuBLAS), decode
shapes M in {1, 16, 32, 64} at the Llama-3-8B qkv/o/gate_up/down layers (goal:
reference time <= 1.15x cuBLAS), prefill M in {512, 4096} at the same layers,
fp32 (IEEE; TF32 off for the stock call too) at 4096^3, and FP8 e4m3 per-token
at 8192^3 and the decode shapes against ``torch._scaled_mm`` (goal >= 0.8x).
Timing: ``triton.testing.do_bench`` median after warm-up, each call taking the
next (x, w) pair of a ring larger than 4x the L2 cache. Every configuration
also gets a quick batch-size verdict (reference vs the split-K mutant as
control), so the cost never travels without the invariance it buys.

    python benchmarks/bench_gemm.py --out "$OUT"            # all cases
    python benchmarks/bench_gemm.py --sweep-large           # candidate large-class tiles (TMA, persistent): time and bits

writes ``$OUT/bench_gemm.jsonl`` (one ``perf`` record per configuration, with
``cost``) and prints a table last.
"""

from __future__ import annotations

import argparse
import os
import sys

from _common import PerfWriter, bench_graph_ms, bench_ms, cost, quick_verdict, ring
from pytest_invariance.oracles.vocabulary import QUANTIZATION_OF_DTYPE as QUANT

LLAMA = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}
DECODE_M = (1, 16, 32, 64)
PREFILL_M = (512, 4096)
# Candidate large-M configs for --sweep-large:
# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages, tma, persistent).
SWEEP_LARGE = (
    (128, 256, 64, 8, 8, 4, False, False),
    (128, 256, 64, 8, 8, 3, True, False),
    (128, 256, 64, 8, 8, 4, True, False),
    (128, 256, 64, 8, 8, 3, True, True),
    (128, 128, 64, 8, 8, 5, True, True),
    (128, 128, 64, 8, 4, 4, True, False),
    (128, 128, 64, 8, 4, 4, False, False),
    (128, 128, 64, 8, 8, 4, False, False),
)
SWEEP_LARGE_M = (128, 512, 1024, 4096)
# Candidate decode-class (M <= 64) configs for --sweep-decode: (BLOCK_N, BLOCK_K, stages).
# BLOCK_M stays 64 with 4 warps (warpgroup MMA, as in the large class).
SWEEP_DECODE = tuple((bn, bk, st) for bn in (16, 32, 64) for bk in (64, 128, 256) for st in (4, 6))


def _cases(args) -> list[tuple[str, str, int, int, int]]:
    """(kind, dtype, M, K, N)."""
    out = []
    for dt in ("bfloat16", "float16"):
        out.append(("matmul", dt, 8192, 8192, 8192))
    for k, n in LLAMA.values():
        for m in (*DECODE_M, *PREFILL_M):
            out.append(("matmul", "bfloat16", m, k, n))
    out.append(("matmul", "float32", 4096, 4096, 4096))
    out.append(("fp8", "float8_e4m3fn", 8192, 8192, 8192))
    for k, n in LLAMA.values():
        for m in DECODE_M:
            out.append(("fp8", "float8_e4m3fn", m, k, n))
    if args.only:
        out = [c for c in out if c[0] == args.only]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="directory for bench_gemm.jsonl")
    ap.add_argument(
        "--sweep-large",
        action="store_true",
        help="only time candidate large-class configs (8192^3 and prefill shapes) and check each is "
        "bit-identical to the current large config",
    )
    ap.add_argument("--only", choices=("matmul", "fp8"), help="one family only")
    ap.add_argument(
        "--sweep-decode",
        action="store_true",
        help="only time candidate decode-class configs (CUDA graphs) and check each is bit-identical "
        "to the large-M class on the same rows",
    )
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from pytest_invariance.oracles.inputs import rows_pool
    from pytest_invariance.reference_kernels import fp8 as fp8mod
    from pytest_invariance.reference_kernels.matmul import linear
    from pytest_invariance.reference_kernels.matmul_triton import TileConfig, bmm_triton
    from pytest_invariance.reference_kernels.mutants.fp8_dynamic_scale import fp8_dynamic_scale_linear
    from pytest_invariance.reference_kernels.mutants.splitk_matmul import splitk_matmul

    if not torch.cuda.is_available():
        print("bench_gemm: CUDA is required (the reference kernels are Triton on GPU)", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # stock fp32 must be IEEE too
    dev = "cuda"
    if args.sweep_decode:
        return _sweep_decode(torch, F, TileConfig, bmm_triton, dev)
    if args.sweep_large:
        return _sweep_large(torch, F, TileConfig, bmm_triton, dev)
    writer = PerfWriter(args.out, "bench_gemm")
    table = []
    verdicts: dict[tuple, tuple] = {}

    def randn(shape, seed, dtype):
        g = torch.Generator(device=dev).manual_seed(seed)
        return torch.randn(shape, generator=g, device=dev, dtype=torch.float32).to(dtype)

    for kind, dt_name, m, k, n in _cases(args):
        if kind == "matmul":
            dtype = getattr(torch, dt_name)
            esize = dtype.itemsize
            pairs = ring(
                lambda i, m=m, k=k, n=n, d=dtype: (randn((m, k), 2 * i, d), randn((n, k), 2 * i + 1, d)),
                (m * k + n * k) * esize,
                cap=64,
            )
            ref, stock, stock_name, quant = linear, F.linear, "torch (cuBLAS)", QUANT[dt_name]
            key = (kind, dt_name, k, n)
            if key not in verdicts:
                w0 = rows_pool(n, (k,), 1, dtype, dev)
                verdicts[key] = quick_verdict(
                    lambda r, w=w0: linear(r, w),
                    lambda r, w=w0: splitk_matmul(r, w),
                    rows_pool(129, (k,), 0, dtype, dev),
                )
            family = "matmul"
        else:
            if not fp8mod.scaled_mm_available(dev):
                print(f"skip fp8 M={m} K={k} N={n}: torch._scaled_mm unavailable", file=sys.stderr)
                continue
            esize = 1

            def make(i, m=m, k=k, n=n):
                wq, ws = fp8mod.quantize_weight(randn((n, k), 2 * i + 1, torch.float32))
                return randn((m, k), 2 * i, torch.bfloat16), wq, ws

            pairs = ring(make, m * k * 2 + n * k, cap=64)
            ref, stock, stock_name = fp8mod.fp8_linear, fp8mod.stock_fp8_linear, "torch._scaled_mm"
            quant, dtype, family = fp8mod.QUANT_TOKEN, torch.bfloat16, "fp8-gemm"
            key = (kind, k, n)
            if key not in verdicts:
                wq0, ws0 = fp8mod.quantize_weight(rows_pool(n, (k,), 1, torch.float32, dev))
                verdicts[key] = quick_verdict(
                    lambda r, a=wq0, b=ws0: fp8mod.fp8_linear(r, a, b),
                    lambda r, a=wq0, b=ws0: fp8_dynamic_scale_linear(r, a, b),
                    rows_pool(129, (k,), 0, torch.float32, dev),
                )
        eager_ref_ms = bench_ms(ref, pairs)
        eager_stock_ms = bench_ms(stock, pairs)
        # Headline: GPU time from CUDA graphs (launch overhead excluded, as engines run
        # decode); the eager times stay in the record.
        ref_ms = bench_graph_ms(ref, pairs)
        stock_ms = bench_graph_ms(stock, pairs)
        flops = 2.0 * m * n * k
        nbytes = (m * k + n * k) * esize + m * n * 2
        verdict, evidence, control = verdicts[key]
        c = cost(
            ref_ms,
            stock_ms,
            stock_name,
            method="CUDA graph over the input ring, median of 30 replays (launch overhead excluded)",
            eager_ratio=round(eager_stock_ms / eager_ref_ms, 4),
            eager_implementation_ms=eager_ref_ms,
            eager_stock_ms=eager_stock_ms,
            implementation_tflops=round(flops / ref_ms / 1e9, 1),
            stock_tflops=round(flops / stock_ms / 1e9, 1),
            implementation_gbps=round(nbytes / ref_ms / 1e6, 1),
            stock_gbps=round(nbytes / stock_ms / 1e6, 1),
        )
        writer.write(
            case=f"{family}[{quant}-M{m}-K{k}-N{n}]",
            family=family,
            implementation="reference",
            verdict=verdict,
            quantization=quant,
            dtype=dtype,
            shape={"M": m, "K": k, "N": n},
            evidence=evidence,
            control=control,
            cost=c,
            extra={"verdict_oracle": "batch-size (sizes 1..129)"},
        )
        table.append((family, quant, m, k, n, ref_ms, stock_ms, verdict, eager_stock_ms / eager_ref_ms))
        del pairs
        torch.cuda.empty_cache()

    print(f"records: {writer.path}")
    print(
        f"{'family':<28}{'quant':<16}{'M':>6}{'K':>7}{'N':>8}{'ref ms':>10}{'stock ms':>10}{'ratio':>7}"
        f"{'eager':>7}  verdict"
    )
    for fam, quant, m, k, n, r, s, v, e in table:
        print(f"{fam:<28}{quant:<16}{m:>6}{k:>7}{n:>8}{r:>10.4f}{s:>10.4f}{s / r:>7.3f}{e:>7.3f}  {v}")
    return 0


def _sweep_decode(torch, F, TileConfig, bmm_triton, dev) -> int:
    """Decode-class candidates: GPU time (CUDA graphs) vs cuBLAS, and bits vs the large class.

    A decode config may only be adopted if, on the same 64 rows, it gives bits
    identical to the large-M config (so batch 64 vs 65 cannot tell the classes
    apart). Prints one line per (shape, config); writes no records (exploration).
    """
    from pytest_invariance.reference_kernels.matmul_triton import pick_config

    dtype = torch.bfloat16
    print(
        f"{'K':>6}{'N':>7}{'M':>4}  {'BN':>3}{'BK':>4}{'st':>3}{'ms':>9}{'cuBLAS':>9}{'ratio':>7}  bits==large"
    )
    for k, n in LLAMA.values():
        g = torch.Generator(device=dev).manual_seed(k + n)
        w = [torch.randn((n, k), generator=g, device=dev, dtype=torch.float32).to(dtype) for _ in range(4)]
        probe = torch.randn((64, k), generator=g, device=dev, dtype=torch.float32).to(dtype)
        large = pick_config(65, n, k, dtype, probe.device, False)  # the class right above decode
        want = bmm_triton(probe[None], w[0].t()[None], config=large)[0]
        for m in (1, 64):
            pairs = [(probe[:m], wi) for wi in w]  # 4 weights: >= 128 MB, past the 50 MB L2
            stock_ms = bench_graph_ms(F.linear, pairs)
            cur = pick_config(m, n, k, dtype, probe.device, False)
            cands = [(cur.block_n, cur.block_k, cur.num_stages)] + [c for c in SWEEP_DECODE]
            for bn, bk, st in cands:
                cfg = TileConfig(64, bn, bk, 1, 4, st)

                def run(x, wt, cfg=cfg):
                    return bmm_triton(x[None], wt.t()[None], config=cfg)[0]

                try:
                    same = bool(torch.equal(run(probe, w[0]).view(torch.int16), want.view(torch.int16)))
                    ms = bench_graph_ms(run, pairs)
                except Exception as exc:  # noqa: BLE001 - a config that does not fit is reported, not fatal
                    print(f"{k:>6}{n:>7}{m:>4}  {bn:>3}{bk:>4}{st:>3}  {type(exc).__name__}")
                    continue
                tag = " (current)" if (bn, bk, st) == cands[0] else ""
                print(
                    f"{k:>6}{n:>7}{m:>4}  {bn:>3}{bk:>4}{st:>3}{ms:>9.4f}{stock_ms:>9.4f}{stock_ms / ms:>7.3f}  {same}{tag}"
                )
    return 0


def _sweep_large(torch, F, TileConfig, bmm_triton, dev) -> int:
    """Large-class candidates (M > 64): GPU time (CUDA graph) and eager ratio vs cuBLAS, bits vs the current config.

    A candidate may only replace the large config if it gives bits identical
    to it on the same rows: the decode class was proven equal to the current
    one. Prints one line per (shape, config); writes no records (exploration).
    """
    from pytest_invariance.reference_kernels.matmul_triton import pick_config

    shapes = [("bfloat16", 8192, 8192, 8192), ("float16", 8192, 8192, 8192)]
    shapes += [("bfloat16", m, k, n) for k, n in LLAMA.values() for m in SWEEP_LARGE_M]
    print(f"{'dtype':<9}{'M':>6}{'K':>7}{'N':>7}  {'config':<44}{'ms':>9}{'cuBLAS':>9}{'ratio':>7}"
          f"{'eager':>7}  bits==current")  # fmt: skip
    for dt_name, m, k, n in shapes:
        dtype = getattr(torch, dt_name)
        g = torch.Generator(device=dev).manual_seed(m + k + n)

        def make(i, g=g, m=m, k=k, n=n, dtype=dtype):
            return (
                torch.randn((m, k), generator=g, device=dev, dtype=torch.float32).to(dtype),
                torch.randn((n, k), generator=g, device=dev, dtype=torch.float32).to(dtype),
            )

        pairs = ring(make, (m * k + n * k) * 2, cap=8)
        stock_ms = bench_graph_ms(F.linear, pairs)
        stock_eager = bench_ms(F.linear, pairs)
        cur = pick_config(m, n, k, dtype, pairs[0][0].device, False)
        want = bmm_triton(pairs[0][0][None], pairs[0][1].t()[None], config=cur)
        for cfg in [cur, *(TileConfig(*c) for c in SWEEP_LARGE)]:

            def run(x, w, cfg=cfg):
                return bmm_triton(x[None], w.t()[None], config=cfg)[0]

            label = (f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} g{cfg.group_m} w{cfg.num_warps} s{cfg.num_stages}"
                     f"{' tma' if cfg.tma else ''}{' pers' if cfg.persistent else ''}"
                     f"{' (current)' if cfg is cur else ''}")  # fmt: skip
            try:
                got = run(*pairs[0])
                same = bool(torch.equal(got.view(torch.int16), want[0].view(torch.int16)))
                ms = bench_graph_ms(run, pairs)
                eager = stock_eager / bench_ms(run, pairs)
            except Exception as exc:  # noqa: BLE001 - a config that does not fit is reported, not fatal
                print(f"{dt_name:<9}{m:>6}{k:>7}{n:>7}  {label:<44}  {type(exc).__name__}: {str(exc)[:80]}")
                continue
            print(f"{dt_name:<9}{m:>6}{k:>7}{n:>7}  {label:<44}{ms:>9.4f}{stock_ms:>9.4f}{stock_ms / ms:>7.3f}"
                  f"{eager:>7.3f}  {same}")  # fmt: skip
        del pairs
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
