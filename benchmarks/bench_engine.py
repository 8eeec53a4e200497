"""Throughput of the bundled engine, default vs invariant mode in the same run, batch 1 / 8 / 64.

    python benchmarks/bench_engine.py                                  # CPU, demo model
    python benchmarks/bench_engine.py --model llama3-8b --device cuda  # H200, synthetic bf16 8B
    python benchmarks/bench_engine.py --speculative ngram:4 --batches 1,8  # + speculative decoding

Per (mode, batch): tokens/s of generated tokens (greedy, ignore_eos, all requests queued at once),
the median decode-only step time against the weight-streaming floor (weight bytes / measured
memory bandwidth), and whether request 0's tokens equal its batch-1 tokens (the cost is never
reported without the invariance it buys). Writes OUT/bench_engine.jsonl (perf records),
OUT/bench_engine.log, and prints a table last. OUT defaults to $OUT or ./out.

With ``--speculative ngram:K`` every mode runs plain and speculative on the same repetitive prompts
(so that prompt-lookup drafts get accepted): tokens/s of each, the acceptance rate, and whether
every request's speculative tokens equal its plain tokens, into OUT/bench_engine_speculative.*.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch

from pytest_invariance.engine.config import demo_model, llama3_8b_sized
from pytest_invariance.engine.llm import LLM
from pytest_invariance.engine.sampler import SamplingParams

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import PerfWriter  # noqa: E402

MODELS = {"demo": demo_model(), "llama3-8b": llama3_8b_sized(vocab_size=128256)}


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def memory_bandwidth(device: str) -> float:
    """Bytes/s of a large device copy (read + write), median of 10."""
    n = (4 << 30) if device.startswith("cuda") else (256 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        sync(device)
        t = time.perf_counter()
        dst.copy_(src)
        sync(device)
        times.append(time.perf_counter() - t)
    return 2 * n / statistics.median(times[2:])


def weight_bytes(llm: LLM) -> int:
    """Bytes a decode step streams: every weight but the embedding table (a gather, not a GEMM)."""
    m = llm.engine.model
    total = m.lm_head.numel() * m.lm_head.element_size() + m.norm.numel() * m.norm.element_size()
    for lay in m.layers:
        total += sum(t.numel() * t.element_size() for t in lay.values() if t is not None)
    return total


def prompts_for(batch: int, length: int, vocab: int) -> list[list[int]]:
    """Distinct deterministic prompts (token ids below 256 so any vocab takes them)."""
    return [[(7 * i + 31 * j + 3) % min(vocab, 256) for j in range(length)] for i in range(batch)]


def repetitive_prompts(batch: int, length: int, vocab: int) -> list[list[int]]:
    """Distinct prompts that repeat a short period (5 to 11 tokens): what prompt lookup drafts from."""
    out = []
    for i in range(batch):
        period = [(13 * i + 7 * j + 5) % min(vocab, 256) for j in range(5 + i % 7)]
        out.append([period[j % len(period)] for j in range(length)])
    return out


def run_batch(
    llm: LLM, prompts: list[list[int]], params: SamplingParams, device: str
) -> tuple[float, list[float], list[int], int, list[list[int]], int]:
    """(seconds, decode-only step times, request 0's tokens, max batch seen, every request's tokens,
    decode-only steps that replayed a graph)."""
    eng = llm.engine
    step_times: list[float] = []
    graph_steps = [0]
    real_step = eng.step

    def timed_step():
        sync(device)
        t = time.perf_counter()
        out = real_step()
        sync(device)
        s = eng.last_step_stats
        if s["num_prefill"] == 0 and s["batch_size"] > 0:
            step_times.append(time.perf_counter() - t)
            graph_steps[0] += bool(s.get("graph"))
        return out

    eng.step = timed_step
    try:
        sync(device)
        t = time.perf_counter()
        comps = llm.generate(prompts, params)
        sync(device)
        elapsed = time.perf_counter() - t
    finally:
        eng.step = real_step
    return (
        elapsed,
        step_times,
        comps[0].token_ids,
        max(c.max_batch_size for c in comps),
        [c.token_ids for c in comps],
        graph_steps[0],
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="demo")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--prompt-len", type=int, default=None, help="default 32 on CPU, 128 on CUDA")
    ap.add_argument("--max-tokens", type=int, default=None, help="default 32 on CPU, 128 on CUDA")
    ap.add_argument("--max-batched-tokens", type=int, default=None, help="default 512 on CPU, 4096 on CUDA")
    ap.add_argument("--modes", default="default,invariant")
    ap.add_argument("--repeats", type=int, default=1,
                    help="time each batch this many times and keep the fastest (a loaded host)")  # fmt: skip
    ap.add_argument("--speculative", default=None, metavar="ngram:K",
                    help="also run each mode with speculative decoding, on repetitive prompts")  # fmt: skip
    ap.add_argument("--cuda-graphs", choices=("auto", "on", "off"), default="auto",
                    help="decode through CUDA graphs (auto: on CUDA); off measures the eager engine")  # fmt: skip
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    prompt_len = args.prompt_len or (128 if cuda else 32)
    max_tokens = args.max_tokens or (128 if cuda else 32)
    budget = args.max_batched_tokens or (4096 if cuda else 512)
    batches = [int(b) for b in args.batches.split(",")]
    mcfg = MODELS[args.model]
    os.makedirs(args.out, exist_ok=True)
    name = "bench_engine_speculative" if args.speculative else "bench_engine"  # other prompts: own file
    log = open(os.path.join(args.out, name + ".log"), "a", encoding="utf-8")
    writer = PerfWriter(args.out, name)

    def say(msg: str) -> None:
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    if cuda:  # the 8B weights are generated on the GPU: prove they are the numpy bits first
        import numpy as np

        from pytest_invariance.engine.weights import synthetic_tensor, synthetic_tensor_torch

        a = synthetic_tensor(0, "check", (1000, 333), 0.02)
        g = synthetic_tensor_torch(0, "check", (1000, 333), 0.02, torch.device(args.device)).cpu().numpy()
        if not np.array_equal(a.view(np.int32), g.view(np.int32)):
            raise SystemExit("GPU synthetic weights differ from the numpy reference bits")
    bw = memory_bandwidth(args.device)
    say(
        f"device={args.device} model={args.model} memory bandwidth {bw / 1e9:.0f} GB/s; prompt {prompt_len}, {max_tokens} tokens"
    )
    blocks = max(batches) * -(-(prompt_len + max_tokens) // 16) + 16
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    rows = []
    results: dict[tuple[str, int], float] = {}
    variants = ["off", args.speculative] if args.speculative else ["off"]
    make_prompts = repetitive_prompts if args.speculative else prompts_for
    plain_tokens: dict[tuple[str, int], list[list[int]]] = {}
    for mode, spec in ((m, v) for m in args.modes.split(",") for v in variants):
        t0 = time.perf_counter()
        llm = LLM(
            model=mcfg,
            device=args.device,
            batch_invariant=mode == "invariant",
            num_blocks=blocks,
            max_num_seqs=max(64, max(batches)),
            max_num_batched_tokens=budget,
            chunk_size=budget,
            speculative=spec,
            cuda_graphs=args.cuda_graphs,
        )
        info = llm.info()
        say(f"[{mode}{'' if spec == 'off' else ' ' + spec}] built in {time.perf_counter() - t0:.1f}s; "
            f"kernels: {json.dumps(info['kernels'])}")  # fmt: skip
        wbytes = weight_bytes(llm)
        floor_ms = wbytes / bw * 1e3
        llm.generate(
            prompts_for(2, 8, mcfg.vocab_size), SamplingParams(max_tokens=4, ignore_eos=True)
        )  # warm-up / JIT
        ref_tokens = None
        for b in batches:
            prompts = make_prompts(b, prompt_len, mcfg.vocab_size)
            # Untimed first: kernels compiled and this batch's graphs captured before the clock runs.
            run_batch(llm, prompts, params, args.device)
            stats0, steps0 = llm.engine.spec_stats.as_dict(), llm.engine.total_steps
            secs, steps, toks, seen, every, graphed = run_batch(llm, prompts, params, args.device)
            stats1, n_steps = llm.engine.spec_stats.as_dict(), llm.engine.total_steps - steps0
            for _ in range(args.repeats - 1):
                again = run_batch(llm, prompts, params, args.device)
                if again[4] != every:
                    say(f"[{mode}] batch {b}: a repeat gave other tokens (run-to-run divergence)")
                secs, steps, graphed = min((secs, steps, graphed), (*again[:2], again[5]), key=lambda r: r[0])
            if b == 1 or ref_tokens is None:
                ref_tokens = run_batch(llm, prompts[:1], params, args.device)[2] if b != 1 else toks
            fork = next((i for i, (x, y) in enumerate(zip(toks, ref_tokens, strict=True)) if x != y), None)
            tps = b * max_tokens / secs
            step_ms = statistics.median(steps) * 1e3 if steps else float("nan")
            key = (mode if spec == "off" else f"{mode}+spec", b)
            results[key] = tps
            verdict = "invariant" if fork is None else "divergent"
            drafted = stats1["draft_tokens"] - stats0["draft_tokens"]
            accepted = stats1["accepted_tokens"] - stats0["accepted_tokens"]
            vs_plain = None
            if spec == "off":
                plain_tokens[(mode, b)] = every
            else:
                base = plain_tokens.get((mode, b))
                vs_plain = None if base is None else sum(x != y for x, y in zip(every, base, strict=True))
            say(
                f"[{key[0]}] batch {b}: {tps:.1f} tok/s, {n_steps} engine steps, decode step {step_ms:.2f} ms (floor {floor_ms:.2f} ms), request 0 vs batch 1: {verdict} (fork {fork}), max batch {seen}"
                + (
                    f"; drafts accepted {accepted}/{drafted}, requests differing from plain {vs_plain}/{b}"
                    if spec != "off"
                    else ""
                )
            )
            rows.append((key[0], b, tps, step_ms, floor_ms, verdict, fork, f"{graphed}/{len(steps)}"))
            base_tps = results.get(("default", b)) if key[0] == "invariant" else None
            spec_ev = {} if spec == "off" else {
                "speculative": spec, "draft_tokens": drafted, "accepted_tokens": accepted,
                "acceptance_rate": accepted / drafted if drafted else 0.0,
                "requests_differing_from_plain": vs_plain,
            }  # fmt: skip
            writer.write(
                case=f"{args.model}-{args.device}-{mode}-b{b}" + ("" if spec == "off" else f"-{spec}"),
                family="engine",
                implementation="bundled",
                mode=mode,
                quantization="bf16" if mcfg.dtype == "bfloat16" else mcfg.dtype,
                dtype=mcfg.dtype,
                shape={
                    "model": args.model,
                    "batch": b,
                    "prompt_len": prompt_len,
                    "max_tokens": max_tokens,
                    "hidden": mcfg.hidden,
                    "layers": mcfg.layers,
                    **({"prompts": "repetitive", "speculative": spec} if args.speculative else {}),
                },
                verdict=verdict,
                evidence={
                    "probe": "request 0 at batch b vs alone",
                    "first_fork": fork,
                    "max_batch_seen": seen,
                    "engine_steps": n_steps,
                    **spec_ev,
                },
                cost={
                    "tokens_per_s": tps,
                    "seconds": secs,
                    "decode_step_ms_median": step_ms,
                    "weight_streaming_floor_ms": floor_ms,
                    "weight_bytes": wbytes,
                    "memory_bandwidth_GBps": bw / 1e9,
                    "floor_over_step": floor_ms / step_ms if steps else None,
                    "step_over_floor": step_ms / floor_ms if steps else None,
                    "cuda_graphs": args.cuda_graphs,
                    "graph_decode_steps": graphed,
                    "decode_steps": len(steps),
                    "invariant_over_default": tps / base_tps if base_tps else None,
                    "method": "wall clock of LLM.generate, synchronized; decode-only steps timed individually"
                    + (f"; fastest of {args.repeats}" if args.repeats > 1 else "")
                    + ("" if spec == "off" else " (steps that verify drafts are not decode-only)"),
                },
                extra={"server_info": info},
            )
        del llm
        gc.collect()  # the engine's graphs go now, not inside the next engine's capture
        if cuda:
            torch.cuda.empty_cache()
    say("")
    say(f"{'mode':<10} {'batch':>5} {'tok/s':>10} {'step ms':>9} {'floor ms':>9} {'vs base':>8} {'graphs':>8}  probe")
    for mode, b, tps, step_ms, floor_ms, verdict, fork, graphed in rows:
        plain = mode.split("+")[0] if "+" in mode else "default"
        ratio = tps / results[(plain, b)] if (plain, b) in results else float("nan")
        say(
            f"{mode:<10} {b:>5} {tps:>10.1f} {step_ms:>9.2f} {floor_ms:>9.2f} {ratio:>8.2f} {graphed:>8}  {verdict}{'' if fork is None else f' @{fork}'}"
        )
    log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
