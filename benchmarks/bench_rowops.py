"""Cost of the reference row kernels vs torch, measured in the same run (CUDA).

For RMSNorm (hidden 4096), log-softmax (vocab 128256) and mean (hidden 4096)
over 1..4096 rows and bf16/fp32: GPU time of the reference kernel and of the
stock torch op (``F.rms_norm``, ``torch.log_softmax``, ``x.mean(-1)``) as a
CUDA graph that calls each once per input of a ring larger than 4x the L2
cache (up to 1024 inputs), so launch overhead (tens of us, more than a small
row op takes) is excluded; the eager ``do_bench`` ratio is kept as
``cost.eager_ratio``.
Bandwidth counts bytes read and written once. Each configuration also gets a
short batch-size oracle run (reference vs the split mutant as control) so
its record carries an honest verdict next to the cost.

    python benchmarks/bench_rowops.py --out "$OUT"

writes ``$OUT/bench_rowops.jsonl`` (one ``perf`` record per configuration,
with ``cost``) and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid

from _common import bench_graph_ms, bench_ms, quick_verdict, ring

ROWS = (1, 4, 16, 64, 256, 1024, 4096)
DTYPES = ("bfloat16", "float32")
# Trials of each record's quick verdict: fp32 split sums often round alike, so the
# control needs more inputs to diverge (as FP32_TRIALS in suites/ops/_rowsuite.py).
VERDICT_TRIALS = {"bfloat16": 1, "float32": 12}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="directory for bench_rowops.jsonl")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated row counts")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from pytest_invariance.oracles.inputs import rows_pool, wide_spread
    from pytest_invariance.reference_kernels import rowops
    from pytest_invariance.reference_kernels.mutants.rmsnorm_split import split_rmsnorm
    from pytest_invariance.reference_kernels.mutants.rowsplit import split_log_softmax, split_mean

    from pytest_invariance import hardware
    from pytest_invariance.records import make_record

    if not torch.cuda.is_available():
        print("bench_rowops: CUDA is required (the reference kernels are Triton on GPU)", file=sys.stderr)
        return 2
    dev = "cuda"
    rows_list = [int(r) for r in args.rows.split(",")]
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bench_rowops.jsonl")
    run_id = uuid.uuid4().hex[:12]
    fp = hardware.fingerprint()
    table = []
    with open(path, "a", encoding="utf-8") as fh:
        for dtype_name in DTYPES:
            dtype = getattr(torch, dtype_name)
            esize = torch.empty((), dtype=dtype).element_size()
            w = wide_spread((4096,), 1, dtype, decades=1.0, device=dev)
            ops = {
                # op: (family, width, reference, stock, mutant, bytes(m, n))
                "rms_norm": (
                    "rmsnorm",
                    4096,
                    lambda x, w=w: rowops.rms_norm(x, w, 1e-5),
                    lambda x, w=w: F.rms_norm(x, (4096,), w, 1e-5),
                    lambda x, w=w: split_rmsnorm(x, w, 1e-5),
                    lambda m, n, e=esize: (2 * m * n + n) * e,
                ),
                "log_softmax": (
                    "softmax",
                    128256,
                    rowops.log_softmax,
                    lambda x: torch.log_softmax(x, -1),
                    split_log_softmax,
                    lambda m, n, e=esize: 2 * m * n * e,
                ),
                "mean": (
                    "softmax",
                    4096,
                    rowops.mean,
                    lambda x: x.mean(-1),
                    split_mean,
                    lambda m, n, e=esize: (m * n + m) * e,
                ),
            }
            for op, (family, n, ref, stock, mutant, nbytes) in ops.items():
                pools = [rows_pool(129, (n,), t, dtype, dev) for t in range(VERDICT_TRIALS[dtype_name])]
                verdict, evidence, control = quick_verdict(ref, mutant, pools)
                del pools
                for m in rows_list:
                    gen = torch.Generator(device=dev).manual_seed(m)
                    inputs_ring = ring(
                        lambda i, m=m, n=n, g=gen, dt=dtype: (
                            torch.randn(m, n, device=dev, generator=g) * 4
                        ).to(dt),
                        m * n * esize,
                    )
                    ref_ms = bench_graph_ms(ref, inputs_ring)
                    stock_ms = bench_graph_ms(stock, inputs_ring)
                    eager_ratio = bench_ms(stock, inputs_ring) / bench_ms(ref, inputs_ring)
                    del inputs_ring
                    torch.cuda.empty_cache()
                    gbps_ref = nbytes(m, n) / ref_ms / 1e6
                    gbps_stock = nbytes(m, n) / stock_ms / 1e6
                    cost = {
                        "ratio": round(stock_ms / ref_ms, 4),
                        "implementation_ms": ref_ms,
                        "stock_ms": stock_ms,
                        "stock": "torch",
                        "method": "CUDA graph over a ring of inputs past L2 (launch excluded), median of replays",
                        "eager_ratio": round(eager_ratio, 4),
                        "implementation_gbps": round(gbps_ref, 1),
                        "stock_gbps": round(gbps_stock, 1),
                    }
                    quant = {"bfloat16": "bf16", "float32": "fp32-ieee"}[dtype_name]
                    rec = make_record(
                        run_id=run_id,
                        fingerprint=fp,
                        family=family,
                        implementation="reference",
                        oracle="perf",
                        verdict=verdict,
                        nodeid=f"benchmarks/bench_rowops.py::{op}[{quant}-M{m}-N{n}]",
                        quantization=quant,
                        dtype=dtype,
                        shape={"op": op, "M": m, "N": n},
                        evidence=evidence,
                        control=control,
                        cost=cost,
                        extra={"op": op, "verdict_oracle": "batch-size (sizes 1..129)"},
                    )
                    fh.write(json.dumps(rec) + "\n")
                    fh.flush()
                    table.append((op, quant, m, n, ref_ms, stock_ms, gbps_ref, gbps_stock, eager_ratio, verdict))
    print(f"records: {path}")
    print(
        f"{'op':<12}{'quant':<11}{'M':>6}{'N':>8}{'ref ms':>10}{'torch ms':>10}{'ref GB/s':>10}{'torch GB/s':>11}"
        f"{'ratio':>7}{'eager':>7}  verdict"
    )
    for op, quant, m, n, r, s, gr, gs, e, v in table:
        print(f"{op:<12}{quant:<11}{m:>6}{n:>8}{r:>10.4f}{s:>10.4f}{gr:>10.0f}{gs:>11.0f}{s / r:>7.2f}{e:>7.2f}  {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
