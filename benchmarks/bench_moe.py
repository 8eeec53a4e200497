"""Cost of the reference fused MoE vs the stock per-expert loop, in the same run.

Writes one JSONL record per (model config, batch size, implementation) under
$OUT (or ./out) with ``cost`` = {ratio: stock_ms / impl_ms, ...} and prints a
short table last. CUDA only (triton.testing.do_bench, median of the runs).

    python benchmarks/bench_moe.py [--sizes 1,16,64,256,1024,4096]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

CONFIGS = {
    "mixtral-8x7b": {"E": 8, "k": 2, "H": 4096, "I": 14336, "route": {"scoring": "softmax"}},
    "qwen3-30b-a3b": {"E": 128, "k": 8, "H": 2048, "I": 768, "route": {"scoring": "softmax"}},
    "deepseek-v3": {
        "E": 256,
        "k": 8,
        "H": 7168,
        "I": 2048,
        "route": {"scoring": "sigmoid", "n_groups": 8, "topk_groups": 4},
    },
}


def _impls():
    from pytest_invariance.reference_kernels.moe import fused_experts, fused_experts_fp8
    from pytest_invariance.reference_kernels.moe.stock import experts_loop

    return experts_loop, fused_experts, fused_experts_fp8


def bench_config(name: str, cfg: dict, sizes: list[int], out: Path) -> list[dict]:
    """Time stock loop, reference bf16 and reference FP8 experts for each batch size."""
    from pytest_invariance.reference_kernels.moe import quantize_weight, route

    stock, ref, ref_fp8 = _impls()
    e, h, i, k = cfg["E"], cfg["H"], cfg["I"], cfg["k"]
    g = torch.Generator(device="cuda").manual_seed(0)
    w1 = (torch.randn((e, 2 * i, h), generator=g, device="cuda") * h**-0.5).bfloat16()
    w2 = (torch.randn((e, h, i), generator=g, device="cuda") * i**-0.5).bfloat16()
    (q1, s1), (q2, s2) = quantize_weight(w1), quantize_weight(w2)
    rows = []
    for t in sizes:
        x = torch.randn((t, h), generator=g, device="cuda").bfloat16()
        weights, ids = route(torch.randn((t, e), generator=g, device="cuda"), k, **cfg["route"])
        stock_ms = _time(stock, x, w1, w2, weights, ids)
        for impl, ms, quant in (
            ("torch-loop", stock_ms, "bf16"),
            ("reference", _time(ref, x, w1, w2, weights, ids), "bf16"),
            ("reference-fp8", _time(ref_fp8, x, q1, q2, s1, s2, weights, ids), "fp8-e4m3-token"),
        ):
            rec = _record(
                name, impl, quant, {"model": name, "T": t, "E": e, "top_k": k, "H": h, "I": i}, ms, stock_ms
            )
            rows.append(rec)
            with open(out / "bench_moe.jsonl", "a") as f:
                f.write(json.dumps(rec) + "\n")
    return rows


def _time(fn, *args) -> float:
    """Median milliseconds of ``fn(*args)`` (triton.testing.do_bench)."""
    from triton.testing import do_bench

    return float(do_bench(lambda: fn(*args), return_mode="median"))


def _record(model: str, impl: str, quant: str, shape: dict, ms: float, stock_ms: float) -> dict:
    """A perf record in the records schema (docs/API.md), cost relative to the stock loop."""
    return {
        "schema": "pytest-invariance.record/1",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "family": "moe-experts",
        "implementation": impl,
        "quantization": quant,
        "dtype": "bfloat16",
        "shape": shape,
        "oracle": "perf",
        "verdict": None,
        "cost": {
            "ratio": stock_ms / ms,
            "implementation_ms": ms,
            "stock_ms": stock_ms,
            "stock": "torch-loop",
            "method": "do_bench median",
        },
        "hardware": {"name": torch.cuda.get_device_name(), "kind": "cuda"},
        "software": {"torch": torch.__version__},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,16,64,256,1024,4096")
    ap.add_argument("--models", default=",".join(CONFIGS))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_moe needs CUDA")
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for name in args.models.split(","):
        rows += bench_config(name, CONFIGS[name], sizes, out)
    print(f"{'model':15} {'T':>5} {'impl':14} {'ms':>9} {'x stock':>8}")
    for r in rows:
        c = r["cost"]
        print(
            f"{r['shape']['model']:15} {r['shape']['T']:>5} {r['implementation']:14} {c['implementation_ms']:9.3f} {c['ratio']:8.2f}"
        )


if __name__ == "__main__":
    main()
