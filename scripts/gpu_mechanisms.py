"""Default mode's designed mechanisms on a GPU: does each move a row's bits, and does invariant mode not?

Prints one line per check and a verdict table; run by the device tool on the H200 (no network).
    python3 scripts/gpu_mechanisms.py
"""

from __future__ import annotations

import torch
from pytest_invariance.reference_kernels.mutants.mbucket_matmul import splitk_linear

from pytest_invariance.engine.config import ModelConfig
from pytest_invariance.engine.llm import LLM
from pytest_invariance.engine.sampler import SamplingParams


def main() -> int:
    dev = torch.device("cuda")
    x = torch.randn(8, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, 4096, device=dev, dtype=torch.bfloat16) / 64
    try:
        torch.mm(x, w.t(), out_dtype=torch.float32)
        out_dtype = "torch.mm(out_dtype=fp32) available"
    except (TypeError, RuntimeError, NotImplementedError) as e:
        out_dtype = f"torch.mm(out_dtype) unavailable ({type(e).__name__}); fp32 copies used"
    split = splitk_linear(x, w, parts=4)
    one = torch.nn.functional.linear(x, w)
    rows = int((split.view(torch.int16) != one.view(torch.int16)).any(1).sum())
    print(f"split-K vs one pass (bf16, K=4096): {rows}/8 rows differ; {out_dtype}")
    model = ModelConfig(hidden=1024, layers=2, heads=16, kv_heads=4, head_dim=64, intermediate=2816,
                        lm_head_shared=30.0)
    p = SamplingParams(max_tokens=24, ignore_eos=True, logprobs=0)
    table = []
    for label, kw in (("default", {}), ("default, gemm one-pass", {"gemm_strategy": "one-pass"}),
                      ("default, split-kv none", {"split_kv": "none"}), ("invariant", {"batch_invariant": True})):
        llm = LLM(model=model, device="cuda", num_blocks=512, **kw)
        alone = llm.generate(["The quick brown fox"], p)[0]
        batch = llm.generate(["The quick brown fox"] * 16, p)
        differ = batch[0].logprobs != alone.logprobs
        tokens = batch[0].token_ids != alone.token_ids
        table.append((label, differ, tokens, llm.info()["batch_mechanisms"]))
    print(f"{'engine (cuda)':<26} {'bs1 vs bs16 logprob bits':<26} tokens   mechanisms")
    for label, differ, tokens, mech in table:
        print(f"{label:<26} {'differ' if differ else 'equal':<26} {'differ' if tokens else 'equal':<8} {mech}")
    ok = table[0][1] and not table[-1][1]
    print("result:", "as designed" if ok else "UNEXPECTED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
