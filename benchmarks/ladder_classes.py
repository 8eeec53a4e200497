"""Equivalence classes of a probe's bits over decode batch sizes, in lockstep, through decode graphs.

The probe and n-1 neighbours are queued at once (one prefill step, then decode steps of exactly n
rows), so every decode step of batch n replays the graph of the ladder's bucket for n. Classes are
batch sizes grouped by identical probe output (token ids and every logprob's bits). In default mode
they should follow the capture ladder's buckets (5..8 share a graph, 9 starts the next); in
invariant mode there is one class, and the default engine is the control.

    python benchmarks/ladder_classes.py --device cuda --model llama3-8b   # H200
    python benchmarks/ladder_classes.py                                   # CPU demo (static buffers)

Writes OUT/ladder_classes.jsonl (batch-size records with the classes and the ladder) and prints a
table last.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    from bench_engine import MODELS, prompts_for
    from pytest_invariance.oracles.classes import class_ranges, equivalence_classes, format_ranges
    from pytest_invariance.oracles.verdict import decide

    from pytest_invariance import hardware
    from pytest_invariance.engine.llm import LLM
    from pytest_invariance.engine.sampler import SamplingParams
    from pytest_invariance.records import make_record, new_run_id

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="demo")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sizes", default="1,2,3,4,5,6,7,8,9,12,16,17,24,25")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    mcfg = MODELS[args.model]
    params = SamplingParams(max_tokens=args.tokens, ignore_eos=True, logprobs=0)
    prompts = prompts_for(max(sizes), 32, mcfg.vocab_size)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "ladder_classes.jsonl")
    run_id, fp = new_run_id(), hardware.fingerprint()
    rows, seen = [], {}
    for mode in ("default", "invariant"):
        llm = LLM(model=mcfg, device=args.device, batch_invariant=mode == "invariant", cuda_graphs="on",
                  max_num_seqs=max(sizes), max_num_batched_tokens=max(512, 32 * max(sizes)))  # fmt: skip
        ladder = llm.info()["cuda_graph_buckets"]
        outs = {}
        for n in sizes:
            c = llm.generate(prompts[:n], params)[0]
            outs[n] = (tuple(c.token_ids), tuple(struct.pack("<d", x) for x in c.logprobs))
        classes = equivalence_classes(outs)
        seen[mode] = len(classes) > 1
        info = llm.info()["cuda_graphs"]
        rows.append((mode, dict(
            family="engine", implementation="bundled", oracle="batch-size", mode=mode, quantization="bf16",
            dtype=mcfg.dtype, shape={"model": args.model, "sizes": sizes, "tokens": args.tokens},
            evidence={"equivalence_classes": class_ranges(classes), "ladder": ladder, "decode": info["decode"],
                      "graph_replays": info["replays"], "compared": "token ids and logprob bits of the probe",
                      "capture_errors": info["capture_errors"]},
        )))  # fmt: skip
        del llm
        gc.collect()
    with open(path, "a", encoding="utf-8") as fh:
        for mode, fields in rows:
            control = None
            if mode == "invariant":
                control = {"name": "the same engine in default mode", "diverged": seen["default"]}
            # The default engine is the control: one class there means the sizes saw no mechanism.
            verdict = decide(seen[mode], seen["default"]) if mode == "invariant" else (
                "divergent" if seen[mode] else "incomplete")  # fmt: skip
            rec = make_record(run_id=run_id, fingerprint=fp, verdict=verdict, control=control,
                              nodeid=f"benchmarks/ladder_classes.py::{args.model}-{args.device}-{mode}", **fields)  # fmt: skip
            fh.write(json.dumps(rec) + "\n")
    print(f"records: {path}")
    for mode, fields in rows:
        ev = fields["evidence"]
        print(f"{mode:<10} classes {format_ranges(ev['equivalence_classes'])}   ladder {ev['ladder']}   "
              f"decode: {ev['decode']}, {ev['graph_replays']} replays")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
