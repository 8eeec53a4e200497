"""Cost of the reference fused MoE vs the stock per-expert loop, in the same run.

Writes one JSONL record per (model config, batch size, implementation) under
$OUT (or ./out) with ``cost`` = {ratio: stock_ms / impl_ms, ...} and prints a
short table last. CUDA only (triton.testing.do_bench, median of the runs).

    python benchmarks/bench_moe.py [--sizes 1,16,64,256,1024,4096]
"""

from __future__ import annotations

import argparse
import os

import torch
from _common import PerfWriter, bench_ms, cost, quick_verdict

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


def bench_config(name: str, cfg: dict, sizes: list[int], writer: PerfWriter) -> list[dict]:
    """Time stock loop, reference bf16 and reference FP8 experts for each batch size.

    Each record carries a quick batch-size verdict of its implementation (rows
    carry their own router logits), controlled by the batch-wide FP8 scale mutant.
    """
    from pytest_invariance.oracles.inputs import rows_pool
    from pytest_invariance.reference_kernels.moe import quantize_weight, route
    from pytest_invariance.reference_kernels.mutants.moe_mutants import fp8_experts_batch_scale

    stock, ref, ref_fp8 = _impls()
    e, h, i, k = cfg["E"], cfg["H"], cfg["I"], cfg["k"]
    g = torch.Generator(device="cuda").manual_seed(0)
    w1 = torch.empty((e, 2 * i, h), dtype=torch.bfloat16, device="cuda")
    w2 = torch.empty((e, h, i), dtype=torch.bfloat16, device="cuda")
    for x in range(e):  # one expert at a time: fp32 temporaries of a DeepSeek layer are ~30 GiB
        w1[x] = torch.randn((2 * i, h), generator=g, device="cuda") * h**-0.5
        w2[x] = torch.randn((h, i), generator=g, device="cuda") * i**-0.5
    (q1, s1), (q2, s2) = quantize_weight(w1), quantize_weight(w2)

    def routed(fn, *weights_args):
        def run(rows: torch.Tensor) -> torch.Tensor:
            x, logits = rows[:, :h].bfloat16(), rows[:, h:]
            wts, ids = route(logits, k, **cfg["route"])
            return fn(x, *weights_args, wts, ids)

        return run

    pool = rows_pool(129, (h + e,), 0, torch.float32, "cuda", decades=1.0)
    mutant = routed(fp8_experts_batch_scale, q1, q2, s1, s2)
    verdicts = {
        "torch-loop": quick_verdict(routed(stock, w1, w2), mutant, pool),
        "reference": quick_verdict(routed(ref, w1, w2), mutant, pool),
        "reference-fp8": quick_verdict(routed(ref_fp8, q1, q2, s1, s2), mutant, pool),
    }
    rows = []
    for t in sizes:
        x = torch.randn((t, h), generator=g, device="cuda").bfloat16()
        weights, ids = route(torch.randn((t, e), generator=g, device="cuda"), k, **cfg["route"])
        stock_ms = bench_ms(stock, [(x, w1, w2, weights, ids)])
        for impl, ms, quant in (
            ("torch-loop", stock_ms, "bf16"),
            ("reference", bench_ms(ref, [(x, w1, w2, weights, ids)]), "bf16"),
            ("reference-fp8", bench_ms(ref_fp8, [(x, q1, q2, s1, s2, weights, ids)]), "fp8-e4m3-token"),
        ):
            verdict, evidence, control = verdicts[impl]
            shape = {"model": name, "T": t, "E": e, "top_k": k, "H": h, "I": i}
            rows.append(
                writer.write(
                    case=f"{name}[{impl}-T{t}]",
                    family="moe-experts",
                    implementation=impl,
                    quantization=quant,
                    dtype="bfloat16",
                    shape=shape,
                    verdict=verdict,
                    evidence=evidence,
                    control=control,
                    cost=cost(
                        ms, stock_ms, "torch-loop", note="expert weights exceed L2; inputs not rotated"
                    ),
                    extra={"verdict_oracle": "batch-size (sizes 1..129)"},
                )
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,16,64,256,1024,4096")
    ap.add_argument("--models", default=",".join(CONFIGS))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_moe needs CUDA")
    writer = PerfWriter(os.environ.get("OUT", "out"), "bench_moe")
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for name in args.models.split(","):
        rows += bench_config(name, CONFIGS[name], sizes, writer)
    print(f"{'model':15} {'T':>5} {'impl':14} {'ms':>9} {'x stock':>8}  verdict")
    for r in rows:
        c = r["cost"]
        print(
            f"{r['shape']['model']:15} {r['shape']['T']:>5} {r['implementation']:14} {c['implementation_ms']:9.3f} {c['ratio']:8.2f}  {r['verdict']}"
        )


if __name__ == "__main__":
    main()
