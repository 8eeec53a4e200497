"""Cost of the reference attention vs every SDPA backend and FlexAttention, in the same run.

Cases (issue 4 goals on H200): decode B=64, 32/8 heads, d=128, KV 4096, bf16 (stock =
the fastest SDPA backend; goal ratio >= 0.8) and prefill B=8, S=4096, causal (stock =
SDPA flash; goal >= 0.7), plus a few neighbouring shapes. Every implementation also gets
a quick batch-size verdict at the benchmark shape (probe sequence alone vs in batches of
N, same lengths), controlled by the split-KV mutants. Writes JSONL perf records with
``cost`` to $OUT/bench_attention.jsonl and prints a short table last. CUDA only.

    python benchmarks/bench_attention.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import traceback

import torch
from _common import PerfWriter, bench_ms, cost

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the two goal shapes")
    ap.add_argument("--no-check", action="store_true", help="skip the quick batch-size verdicts")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_attention needs CUDA")
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
