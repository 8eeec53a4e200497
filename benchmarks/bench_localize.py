"""Wall time of localization and of the op census on a random-weight Llama (CPU or CUDA).

Issue #18's targets, on the H200 with the Llama-3-8B shapes in bf16: localizing one probe over
batch sizes 1, 8, 64 in under 60 s, and the census (every distinct op x the quick profile) in
under 5 minutes. Measured here, stock and under ``reference_kernels.enable()``, with the culprit
each run names (a benchmark, not a timed test: nothing fails on time).

    python benchmarks/bench_localize.py --model random-llama:llama3-8b --device cuda --dtype bf16 --out "$OUT"

writes ``$OUT/bench_localize.jsonl`` (one JSON object per mode) and prints them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="random-llama:tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--batch", default="1,8,64")
    ap.add_argument("--no-census", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    import torch
    from pytest_invariance.reference_kernels import enable

    from pytest_invariance.localize.census import census
    from pytest_invariance.localize.models import load, token_rows
    from pytest_invariance.localize.run import localize

    sizes = [int(s) for s in args.batch.split(",")]
    t0 = time.perf_counter()
    m = load(args.model, device=args.device, dtype=args.dtype)
    build = time.perf_counter() - t0
    ids = token_rows(m.vocab, args.tokens, max(sizes), 0, m.device)
    rows = []
    for mode in ("stock", "enable"):
        ctx = enable() if mode == "enable" else contextlib.nullcontext()
        with ctx:
            sync = torch.cuda.synchronize if m.device.type == "cuda" else (lambda: None)
            t1 = time.perf_counter()
            one = localize(m.model, ids[0], ids[1:], batch_sizes=sizes, positions=[0], call=m.call)
            sync()
            t_one = time.perf_counter() - t1
            t1 = time.perf_counter()
            ends = localize(m.model, ids[0], ids[1:], batch_sizes=sizes, positions="ends", call=m.call)
            sync()
            t_ends = time.perf_counter() - t1
            row = {
                "model": m.name, "device": args.device, "dtype": args.dtype, "mode": mode, "tokens": args.tokens,
                "batch_sizes": sizes, "build_s": round(build, 1), "ops": one.ops,
                "localize_position0_s": round(t_one, 2), "localize_ends_s": round(t_ends, 2),
                "culprits": [(c["module"], c["op"], c["batch_sizes"], c["max_ulp"]) for c in ends.culprits],
                "output_differs_at": sorted({c.batch_size for c in ends.configs if c.verdict.output_equal is False}),
            }  # fmt: skip
            if not args.no_census:
                t1 = time.perf_counter()
                cen = census(m.model, ids, call=m.call)
                sync()
                run = [r for r in cen.ops if r.verdicts]
                row.update(census_s=round(time.perf_counter() - t1, 1), census_ops=len(cen.ops), census_run=len(run),
                           census_divergent=sorted({f"{r.spec.name} @ {r.spec.paths[0]}" for r in run
                                                    if "divergent" in r.verdicts.values()}),
                           census_unrouted=sorted({r.spec.name for r in run if r.routed is False}))  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_localize.jsonl"), "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
