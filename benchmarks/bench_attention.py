"""Cost of the reference attention vs every SDPA backend and FlexAttention, in the same run.

Cases (issue 4 goals on H200): decode B=64, 32/8 heads, d=128, KV 4096, bf16 (stock =
the fastest SDPA backend; goal ratio >= 0.8) and prefill B=8, S=4096, causal (stock =
SDPA flash; goal >= 0.7), plus a few neighbouring shapes. Every implementation also gets
a quick batch-size verdict at the benchmark shape (probe sequence alone vs in batches of
N, same lengths), controlled by the split-KV mutants. Writes JSONL perf records with
``cost`` to $OUT/bench_attention.jsonl and prints a short table last. CUDA only.

    python benchmarks/bench_attention.py [--quick]
    python benchmarks/bench_attention.py --sweep   # candidate tiles x split sizes: time, HBM fraction, bits

Decode records carry the KV bytes read per second against the device's copy bandwidth measured
in the same run (``hbm_fraction``), the limit of a memory-bound kernel.
"""

from __future__ import annotations

import argparse
import math
import os
import traceback

import torch
from _common import PerfWriter, bench_graph_ms, bench_ms, cost

HEADS = {"llama3-8b": (32, 8, 128), "mha-32x128": (32, 32, 128)}
DECODE_CASES = [
    ("llama3-8b", 64, 4096),
    ("llama3-8b", 1, 4096),
    ("llama3-8b", 256, 1024),
    ("mha-32x128", 64, 4096),
]
PREFILL_CASES = [("llama3-8b", 8, 4096), ("llama3-8b", 1, 8192), ("mha-32x128", 8, 4096)]
PAGE = 16


def _impls(family: str) -> dict:
    from pytest_invariance.reference_kernels.attention import decode_paged, prefill_varlen, stock

    out = {"reference": decode_paged if family == "decode" else prefill_varlen}
    for b in stock.SDPA_BACKENDS:
        out[f"torch-sdpa-{b}"] = stock.sdpa_decode(b) if family == "decode" else stock.sdpa_prefill(b)
    out["torch-flex"] = stock.flex_decode if family == "decode" else stock.flex_prefill
    return out


def _rand(shape, g) -> torch.Tensor:
    return (torch.randn(shape, generator=g, device="cuda") * 0.5).to(torch.bfloat16)


def decode_inputs(heads, b: int, kv: int, seed: int = 0):
    hq, hkv, d = heads
    g = torch.Generator(device="cuda").manual_seed(seed)
    nblk = -(-kv // PAGE)
    kc = _rand((b * nblk, PAGE, hkv, d), g)
    vc = _rand((b * nblk, PAGE, hkv, d), g)
    perm = torch.randperm(b * nblk, generator=g, device="cuda").to(torch.int32)
    bt = perm.view(b, nblk).contiguous()
    sl = torch.full((b,), kv, dtype=torch.int32, device="cuda")
    return _rand((b, hq, d), g), kc, vc, bt, sl


def prefill_inputs(heads, b: int, s: int, seed: int = 0):
    hq, hkv, d = heads
    g = torch.Generator(device="cuda").manual_seed(seed)
    cu = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device="cuda")
    return _rand((b * s, hq, d), g), _rand((b * s, hkv, d), g), _rand((b * s, hkv, d), g), cu, cu


def _flops(family: str, heads, b: int, n: int) -> float:
    hq, _, d = heads
    if family == "decode":
        return 4.0 * b * hq * n * d
    return 4.0 * b * hq * n * n * d / 2  # causal


def _verdict(family: str, fn, mutant, args, b: int):
    """Quick batch-size verdict (probe = sequence 0) at the benchmark shape."""
    from pytest_invariance.oracles.batch import batch_size_oracle
    from pytest_invariance.oracles.verdict import decide

    sizes = sorted({n for n in (1, 2, 3, 8, 9, 33, 64, b) if n <= b})
    if len(sizes) < 2:
        return "incomplete", {"note": "batch of one: no batch-size check at this shape"}, None
    if family == "decode":
        q, kc, vc, bt, sl = args

        def as_rows(f):
            return lambda rows: f(q[rows[:, 0]], kc, vc, bt[rows[:, 0]], sl[rows[:, 0]])
    else:
        q, k, v, cu, _ = args
        s = int(cu[1])

        def as_rows(f):
            def run(rows):
                idx = torch.cat(
                    [torch.arange(int(i) * s, (int(i) + 1) * s, device="cuda") for i in rows[:, 0]]
                )
                c = torch.arange(0, (rows.shape[0] + 1) * s, s, dtype=torch.int32, device="cuda")
                return f(q[idx], k[idx], v[idx], c, c).view(rows.shape[0], s, *q.shape[1:])

            return run

    rows = torch.arange(b, device="cuda")[:, None]
    res = batch_size_oracle(as_rows(fn), rows, sizes)
    ctl = batch_size_oracle(as_rows(mutant), rows, sizes)
    control = {
        "name": getattr(mutant, "__name__", "mutant"),
        "diverged": ctl.diverged,
        "evidence": ctl.evidence(),
    }
    return decide(res.diverged, ctl.diverged), res.evidence(), control


def run_case(family: str, cfg: str, b: int, n: int, writer: PerfWriter, check: bool) -> list[dict]:
    from pytest_invariance.reference_kernels.mutants.splitkv_decode import splitkv_decode, splitkv_prefill

    heads = HEADS[cfg]
    args = decode_inputs(heads, b, n) if family == "decode" else prefill_inputs(heads, b, n)
    mutant = splitkv_decode if family == "decode" else splitkv_prefill
    times: dict[str, float] = {}
    errors: dict[str, str] = {}
    for name, fn in _impls(family).items():
        try:
            fn(*args)
            torch.cuda.synchronize()
            times[name] = bench_ms(fn, [args])
        except Exception as exc:  # noqa: BLE001 - a backend that cannot run this shape is a result
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            torch.cuda.empty_cache()
    sdpa = {k: t for k, t in times.items() if k.startswith("torch-sdpa")}
    if family == "decode" and sdpa:
        stock = min(sdpa, key=sdpa.get)
    else:
        stock = (
            "torch-sdpa-flash" if "torch-sdpa-flash" in times else (min(sdpa, key=sdpa.get) if sdpa else None)
        )
    out = []
    fam = f"attention-{family}"
    shape = {"model": cfg, "B": b, ("kv_len" if family == "decode" else "S"): n, "Hq": heads[0],
             "Hkv": heads[1], "D": heads[2], "causal": family == "prefill", "page": PAGE}  # fmt: skip
    for name, fn in _impls(family).items():
        if name in errors:
            rec = writer.write(case=f"{family}[{cfg}-B{b}-{n}-{name}]", family=fam, implementation=name,
                               quantization="bf16", dtype="bfloat16", shape=shape, verdict="unsupported",
                               evidence={"error": errors[name]}, cost=None)  # fmt: skip
            out.append(rec)
            continue
        verdict, evidence, control = ("incomplete", {"note": "verdict check skipped (--no-check)"}, None)
        if check:
            try:
                verdict, evidence, control = _verdict(family, fn, mutant, args, b)
            except Exception as exc:  # noqa: BLE001
                verdict, evidence = "incomplete", {"error": f"{type(exc).__name__}: {exc}"[:300]}
        ms = times[name]
        c = None
        if stock is not None:
            tflops = _flops(family, heads, b, n) / (ms * 1e-3) / 1e12
            c = cost(ms, times[stock], stock, tflops=round(tflops, 2), note="same inputs each call")
        rec = writer.write(case=f"{family}[{cfg}-B{b}-{n}-{name}]", family=fam, implementation=name,
                           quantization="bf16", dtype="bfloat16", shape=shape, verdict=verdict,
                           evidence=evidence, control=control, cost=c,
                           extra={"verdict_oracle": "batch-size (probe alone vs batch, same lengths)"})  # fmt: skip
        out.append(rec)
    return out


def copy_bandwidth() -> float:
    """Bytes/s of a 4 GiB device copy (read + write), median of 10: the HBM figure decode is held to."""
    import statistics

    src = torch.ones(4 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (4 << 30) / statistics.median(times[2:])


def kv_bytes(heads, b: int, kv: int) -> int:
    return 2 * b * kv * heads[1] * heads[2] * 2  # K and V, bf16


# Candidates: Tiles(block_m, warps, stages, block_n[, fused_merge[, tma]]) x split size. The key block and the split size
# change bits (a different, equally invariant contract), so each (block_n, split) is checked against
# the (64, 4, 2) prefill at that block and split, and decode against it at the same positions.
# A sixth field True: K/V through TMA descriptors (the prefill's loads only; same values, same bits).
SWEEP_PREFILL = (((64, 4, 3, 64), 1024), ((128, 8, 3, 64), 1024), ((64, 4, 2, 128), 1024), ((128, 8, 2, 128), 1024),
                 ((128, 8, 3, 128), 1024), ((64, 4, 3, 64), 8192), ((128, 8, 2, 128), 8192),
                 ((64, 4, 2, 64, False, True), 1024), ((64, 4, 3, 64, False, True), 1024),
                 ((128, 8, 3, 64, False, True), 1024), ((128, 8, 3, 128, False, True), 1024))  # fmt: skip
# A fifth field True: the fused merge (the last split program merges; no second kernel), at 2-4 stages.
SWEEP_DECODE = (((64, 4, 3, 64), 1024), ((64, 4, 3, 64, True), 1024), ((64, 4, 2, 64, True), 1024),
                ((64, 4, 4, 64, True), 1024), ((64, 4, 2, 128), 1024), ((64, 4, 3, 128), 1024),
                ((64, 8, 2, 128), 1024))  # fmt: skip
DECODE_GOALS = ((64, 4096), (1, 32768), (1, 4096))


def _ragged(heads):
    """4 sequences of ragged lengths (tails in every split), every position a query, and the same
    K/V in a paged cache: the inputs the bits checks compare prefill and decode on."""
    g = torch.Generator(device="cuda").manual_seed(3)
    lens = [3000, 1025, 64, 2049]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    tot = int(cu[-1])
    q, k, v = (_rand((tot, n, heads[2]), g) for n in (heads[0], heads[1], heads[1]))
    nblk = [-(-n // PAGE) for n in lens]
    kc = torch.zeros((sum(nblk) + 1, PAGE, heads[1], heads[2]), dtype=torch.bfloat16, device="cuda")
    vc = torch.zeros_like(kc)
    bt = torch.zeros((len(lens), max(nblk)), dtype=torch.int32, device="cuda")
    first = 0
    for i, n in enumerate(lens):
        bt[i, : nblk[i]] = torch.arange(first, first + nblk[i], device="cuda")
        pos = torch.arange(n, device="cuda")
        slot = bt[i].long()[pos // PAGE] * PAGE + pos % PAGE
        kc.view(-1, heads[1], heads[2])[slot] = k[int(cu[i]) : int(cu[i + 1])]
        vc.view(-1, heads[1], heads[2])[slot] = v[int(cu[i]) : int(cu[i + 1])]
        first += nblk[i]
    sl = torch.tensor(lens, dtype=torch.int32, device="cuda")
    return (q, k, v, cu), (q[(cu[1:] - 1).long()], kc, vc, bt, sl)


def _kernel_us(fn, args) -> dict[str, float]:
    """Device microseconds per call of each kernel ``fn`` launches (torch.profiler, 20 calls)."""
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn(*args)
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for ev in prof.key_averages():
        if ev.device_type.name == "CUDA" and ev.count:
            out[ev.key[:40]] = round(ev.device_time_total / 20, 1)
    return out


def sweep(writer: PerfWriter) -> list[str]:
    """Time candidate (tiles, split size) pairs and check each one's bits: prefill against the
    (64, 4, 2) prefill at the same split size, decode against that prefill at the same positions
    (the decode == prefill contract). Decode is timed eagerly (launches included) and replayed from
    a CUDA graph; at B=1, KV=32768 the profiler splits it into its two kernels."""
    from pytest_invariance.reference_kernels.attention import stock
    from pytest_invariance.reference_kernels.attention import triton_attn as ta

    heads = HEADS["llama3-8b"]
    lines = []
    bw = copy_bandwidth()
    lines.append(f"device copy bandwidth {bw / 1e9:.0f} GB/s")
    (q, k, v, cu), dec_bits = _ragged(heads)
    pargs = prefill_inputs(heads, 8, 4096)
    flops = _flops("prefill", heads, 8, 4096)
    stock_ms = {}
    for b_name in ("cudnn", "flash"):
        if b_name in stock.SDPA_BACKENDS:
            try:
                fn = stock.sdpa_prefill(b_name)
                fn(*pargs)
                stock_ms[b_name] = bench_ms(fn, [pargs])
            except Exception as exc:  # noqa: BLE001 - a backend this build lacks is a result
                lines.append(f"prefill stock {b_name}: {type(exc).__name__}: {str(exc)[:120]}")
    best = min(stock_ms.values()) if stock_ms else math.nan
    lines.append(f"prefill B8 S4096 stock: {stock_ms}")
    bases: dict = {}

    def base(block_n: int, split: int) -> torch.Tensor:
        if (block_n, split) not in bases:
            t0 = ta.Tiles(block_n=block_n)
            bases[block_n, split] = ta.prefill_varlen_triton(q, k, v, cu, cu, tiles=t0, split_size=split)
        return bases[block_n, split]

    for t, split in SWEEP_PREFILL:
        tiles = ta.Tiles(*t)
        try:
            got = ta.prefill_varlen_triton(q, k, v, cu, cu, tiles=tiles, split_size=split)
            # the (64, 4, 2) candidate is the base itself: its bits check says nothing, so it says so
            same = ("base" if tiles == ta.Tiles(block_n=tiles.block_n)
                    else torch.equal(got.view(torch.int16), base(tiles.block_n, split).view(torch.int16)))
            fn = lambda *a, tiles=tiles, split=split: ta.prefill_varlen_triton(*a, tiles=tiles, split_size=split)  # noqa: E731
            fn(*pargs)
            ms = bench_ms(fn, [pargs])
        except Exception as exc:  # noqa: BLE001
            lines.append(f"prefill {t} split {split}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            continue
        lines.append(f"prefill B8 S4096 tiles {t} split {split}: {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s, "
                     f"x best stock {best / ms:.3f}; bits == (64, 4, 2) prefill: {same}")  # fmt: skip
        writer.write(case=f"sweep-prefill[{t}-split{split}]", family="attention-prefill", implementation="reference",
                     quantization="bf16", dtype="bfloat16", shape={"B": 8, "S": 4096, "tiles": list(t), "split": split},
                     verdict="incomplete", evidence={"bits_equal_prefill_64_4_2": same,
                     "note": "tile candidate: timing and bits only, no batch check"}, cost=cost(
                         ms, best, "fastest SDPA (" + ",".join(stock_ms) + ")", tflops=round(flops / ms / 1e9, 1)))  # fmt: skip
    last = (cu[1:] - 1).long()
    for t, split in SWEEP_DECODE:
        tiles = ta.Tiles(*t)
        try:
            got = ta.decode_paged_triton(*dec_bits, tiles=tiles, split_size=split)
            same = torch.equal(got.view(torch.int16), base(tiles.block_n, split)[last].view(torch.int16))
        except Exception as exc:  # noqa: BLE001
            lines.append(f"decode {t} split {split}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            continue
        for b, kv in DECODE_GOALS:
            dargs = decode_inputs(heads, b, kv)
            fn = lambda *a, tiles=tiles, split=split: ta.decode_paged_triton(*a, tiles=tiles, split_size=split)  # noqa: E731
            fn(*dargs)
            ms = bench_ms(fn, [dargs])
            gms = bench_graph_ms(fn, [dargs])
            # Four calls on four distinct caches in one graph: the replay's own start latency spread
            # over four calls, as inside an engine's decode-step graph (L2 still defeated).
            ring = [dargs, *(decode_inputs(heads, b, kv, seed=s) for s in (1, 2, 3))]
            g4ms = bench_graph_ms(fn, ring)
            del ring
            frac, gfrac, g4frac = (kv_bytes(heads, b, kv) / (x * 1e-3) / bw for x in (ms, gms, g4ms))
            parts = _kernel_us(fn, dargs) if (b, kv) == (1, 32768) else {}
            lines.append(f"decode B{b} KV{kv} tiles {t} split {split}: eager {ms * 1e3:.1f} us ({frac:.1%} of copy "
                         f"bandwidth), graph {gms * 1e3:.1f} us ({gfrac:.1%}), 4 calls a graph {g4ms * 1e3:.1f} us "
                         f"({g4frac:.1%}); bits == prefill: {same}"
                         + (f"; kernels (us) {parts}" if parts else ""))  # fmt: skip
            writer.write(case=f"sweep-decode[B{b}-{kv}-{t}-split{split}]", family="attention-decode",
                         implementation="reference", quantization="bf16", dtype="bfloat16",
                         shape={"B": b, "kv_len": kv, "tiles": list(t), "split": split}, verdict="incomplete",
                         evidence={"bits_equal_prefill": same, "kernels_us": parts,
                                   "note": "candidate: timing and decode == prefill bits only, no batch check"},
                         cost={"implementation_ms": ms, "graph_ms": gms, "hbm_fraction": round(frac, 4),
                               "graph_hbm_fraction": round(gfrac, 4), "graph4_ms": g4ms,
                               "graph4_hbm_fraction": round(g4frac, 4), "copy_gbps": round(bw / 1e9)})  # fmt: skip
            del dargs
        torch.cuda.empty_cache()
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the two goal shapes")
    ap.add_argument("--no-check", action="store_true", help="skip the quick batch-size verdicts")
    ap.add_argument("--sweep", action="store_true", help="only the candidate-tile sweep")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_attention needs CUDA")
    if args.sweep:
        lines = sweep(PerfWriter(os.environ.get("OUT", "out"), "bench_attention_sweep"))
        print("\n".join(lines))
        return
    writer = PerfWriter(os.environ.get("OUT", "out"), "bench_attention")
    dec = DECODE_CASES[:1] if args.quick else DECODE_CASES
    pre = PREFILL_CASES[:1] if args.quick else PREFILL_CASES
    rows = []
    for family, cases in (("decode", dec), ("prefill", pre)):
        for cfg, b, n in cases:
            try:
                rows += run_case(family, cfg, b, n, writer, not args.no_check)
            except Exception:  # noqa: BLE001 - keep the other cases
                traceback.print_exc()
    print(
        f"\n{'family':8} {'model':11} {'B':>4} {'N':>5} {'impl':18} {'ms':>8} {'x stock':>8} {'TFLOP/s':>8}  verdict"
    )
    for r in rows:
        c = r.get("cost") or {}
        sh = r["shape"]
        n = sh.get("kv_len", sh.get("S"))
        ms = c.get("implementation_ms", math.nan)
        print(
            f"{r['family'][10:]:8} {sh['model']:11} {sh['B']:>4} {n:>5} {r['implementation']:18} "
            f"{ms:8.3f} {c.get('ratio', math.nan):8.2f} {c.get('tflops', math.nan):8.1f}  {r['verdict']}"
            + (f" (stock={c['stock']})" if c else "")
        )
    print(f"records: {writer.path}")


if __name__ == "__main__":
    main()
