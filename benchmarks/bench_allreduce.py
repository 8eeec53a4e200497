"""Cost of each NCCL pinning, the reference all-reduce and symmetric memory against NCCL defaults.

Messages of 1, 64, 4096 and 65536 tokens x hidden 4096, bf16, on ``--world`` NCCL ranks (one GPU
each; default every GPU of the host; world size 1 runs too, where every "all-reduce" is a local
copy and the numbers are launch overhead). One pool of ranks per NCCL configuration, since NCCL
reads its environment once per process. Each rank times every call with CUDA events after a
barrier; a case's time is the median over calls of each rank, then the maximum over ranks.

    python benchmarks/bench_allreduce.py --out "$OUT" [--world N] [--tokens 1,64] [--iters 20]

writes ``$OUT/bench_allreduce.jsonl`` (one ``perf`` record per case, ``cost.ratio`` = NCCL-default
time / this time, so above 1 is faster) and prints a table last. No invariance verdict here: the
suite's records (``suites/ops/test_allreduce.py``) carry those; these records say ``incomplete``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from functools import partial

from _common import PerfWriter, cost

TOKENS = (1, 64, 4096, 65536)
HIDDEN = 4096
BASELINE = "torch-nccl"  # under nccl-default
CALL_TIMEOUT_S = 300.0
NOTE = "cost only; the invariance verdicts are the suite's records (suites/ops/test_allreduce.py)"


def _cases() -> list[tuple[str, str]]:
    """(implementation, NCCL configuration) in run order, the baseline first; symmetric memory only where torch has it."""
    from pytest_invariance.reference_kernels.collectives import symm_mem
    from pytest_invariance.reference_kernels.collectives.nccl_configs import DEFAULT, STOCK_ROWS

    rows = [(name, cfg) for name, cfg in STOCK_ROWS.items()]
    rows += [("reference", DEFAULT)] + ([(symm_mem.NAME, DEFAULT)] if symm_mem.unavailable() is None else [])
    return sorted(rows, key=lambda r: (r[0] != BASELINE, r[1] != DEFAULT))


def _measure(pool, world: int, name: str, tokens: int, iters: int, warmup: int) -> tuple[float, list[float]]:
    """(max over ranks of each rank's median ms, the per-rank medians) of one case."""
    import torch
    from pytest_invariance.reference_kernels.collectives.timing import time_all_reduce

    fn = partial(time_all_reduce, implementation=name, tokens=tokens, hidden=HIDDEN, iters=iters, warmup=warmup)
    outs = pool.run(fn, world, [[torch.zeros(1)]] * world)
    medians = [statistics.median(o.tolist()) for o in outs]
    return max(medians), medians


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="directory for bench_allreduce.jsonl")
    ap.add_argument("--world", type=int, default=None, help="NCCL ranks, one GPU each (default: every GPU)")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="comma-separated message rows")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args(argv)
    import torch
    from pytest_invariance.reference_kernels.collectives import symm_mem
    from pytest_invariance.reference_kernels.collectives.group import RankPool
    from pytest_invariance.reference_kernels.collectives.nccl_configs import CONFIGS, nccl_version

    gpus = torch.cuda.device_count()
    if gpus == 0:
        print("bench_allreduce: CUDA is required (NCCL ranks, one GPU each)", file=sys.stderr)
        return 2
    world = gpus if args.world is None else args.world
    try:
        tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        print(f"bench_allreduce: --tokens {args.tokens!r} is not a comma-separated list of integers", file=sys.stderr)
        return 2
    if not 1 <= world <= gpus or min(tokens) < 1 or args.iters < 1:
        print(f"bench_allreduce: need 1 <= --world <= {gpus} GPUs (got {world}), tokens >= 1, iters >= 1", file=sys.stderr)
        return 2
    writer = PerfWriter(args.out, "bench_allreduce")
    common = {"family": "allreduce", "quantization": "bf16", "dtype": "bfloat16"}
    base: dict[int, float] = {}
    table, failed = [], False
    if symm_mem.unavailable() is not None:
        for t in tokens:
            writer.write(case=f"allreduce[{symm_mem.NAME}-T{t}-H{HIDDEN}-w{world}]", implementation=symm_mem.NAME,
                         verdict="unsupported", shape={"tokens": t, "hidden": HIDDEN, "world_size": world},
                         evidence={"error": symm_mem.unavailable()}, **common)  # fmt: skip
    cases = _cases()
    for cfg_name in dict.fromkeys(cfg for _, cfg in cases):  # one pool per configuration, in case order
        cfg = CONFIGS[cfg_name]
        try:
            pool = RankPool(world, (world,), backend="nccl", env=cfg.environment(), call_timeout=CALL_TIMEOUT_S)
        except (RuntimeError, TimeoutError, ValueError) as exc:
            print(f"bench_allreduce: {cfg_name} ranks did not start: {exc}", file=sys.stderr)
            failed = True
            continue
        with pool:
            for name, case_cfg in cases:
                if case_cfg != cfg_name:
                    continue
                for t in tokens:
                    shape = {"tokens": t, "hidden": HIDDEN, "world_size": world}
                    case = f"allreduce[{name}-T{t}-H{HIDDEN}-w{world}]"
                    extra = {"nccl_config": cfg_name, "nccl_env": cfg.environment(),
                             "nccl_version": nccl_version(), "note": NOTE}  # fmt: skip
                    try:
                        ms, medians = _measure(pool, world, name, t, args.iters, args.warmup)
                    except (RuntimeError, TimeoutError) as exc:
                        writer.write(case=case, implementation=name, verdict="incomplete", shape=shape,
                                     evidence={"error": str(exc)}, extra=extra, **common)  # fmt: skip
                        table.append((name, cfg_name, t, None, base.get(t), str(exc)[:60]))
                        failed = True
                        if pool.closed is not None:
                            pool.restart()
                        continue
                    if name == BASELINE and cfg_name == "nccl-default":
                        base[t] = ms
                    how = {"method": f"CUDA events per rank around one call after a barrier; median of"
                                     f" {args.iters} calls per rank, max over {world} rank(s)",
                           "rank_medians_ms": medians}  # fmt: skip
                    c = (cost(ms, base[t], f"{BASELINE} (nccl-default)", **how) if t in base
                         else {"ratio": None, "implementation_ms": ms, "stock_ms": None, "stock": None, **how})  # fmt: skip
                    writer.write(case=case, implementation=name, verdict="incomplete", shape=shape,
                                 evidence={"note": NOTE}, cost=c, extra=extra, **common)  # fmt: skip
                    table.append((name, cfg_name, t, ms, base.get(t), ""))
    print(f"records: {writer.path}")
    print(f"world size {world} of {gpus} GPU(s), hidden {HIDDEN}, bf16; ratio = {BASELINE} (nccl-default) ms / ms")
    print(f"{'implementation':<26}{'config':<27}{'tokens':>7}{'ms':>10}{'default':>10}{'ratio':>7}")
    for name, cfg_name, t, ms, b, err in table:
        if ms is None:
            print(f"{name:<26}{cfg_name:<27}{t:>7}  {err}")
        else:
            ratio = f"{b / ms:>7.3f}" if b else f"{'-':>7}"
            print(f"{name:<26}{cfg_name:<27}{t:>7}{ms:>10.4f}{(b or float('nan')):>10.4f}{ratio}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
