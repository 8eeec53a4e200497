"""Throughput of the bundled engine, default vs invariant mode in the same run, batch 1 / 8 / 64.

    python benchmarks/bench_engine.py                                  # CPU, demo model
    python benchmarks/bench_engine.py --model llama3-8b --device cuda  # H200, synthetic bf16 8B

Per (mode, batch): tokens/s of generated tokens (greedy, ignore_eos, all requests queued at once),
the median decode-only step time against the weight-streaming floor (weight bytes / measured
memory bandwidth), and whether request 0's tokens equal its batch-1 tokens (the cost is never
reported without the invariance it buys). Writes OUT/bench_engine.jsonl (perf records),
OUT/bench_engine.log, and prints a table last. OUT defaults to $OUT or ./out.
"""

from __future__ import annotations

import argparse
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


def run_batch(
    llm: LLM, prompts: list[list[int]], params: SamplingParams, device: str
) -> tuple[float, list[float], list[int], int]:
    """(seconds, decode-only step times, request 0's tokens, max batch seen)."""
    eng = llm.engine
    step_times: list[float] = []
    real_step = eng.step

    def timed_step():
        sync(device)
        t = time.perf_counter()
        out = real_step()
        sync(device)
        s = eng.last_step_stats
        if s["num_prefill"] == 0 and s["batch_size"] > 0:
            step_times.append(time.perf_counter() - t)
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
    return elapsed, step_times, comps[0].token_ids, max(c.max_batch_size for c in comps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="demo")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--prompt-len", type=int, default=None, help="default 32 on CPU, 128 on CUDA")
    ap.add_argument("--max-tokens", type=int, default=None, help="default 32 on CPU, 128 on CUDA")
    ap.add_argument("--max-batched-tokens", type=int, default=None, help="default 512 on CPU, 4096 on CUDA")
    ap.add_argument("--modes", default="default,invariant")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    prompt_len = args.prompt_len or (128 if cuda else 32)
    max_tokens = args.max_tokens or (128 if cuda else 32)
    budget = args.max_batched_tokens or (4096 if cuda else 512)
    batches = [int(b) for b in args.batches.split(",")]
    mcfg = MODELS[args.model]
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "bench_engine.log"), "a", encoding="utf-8")
    writer = PerfWriter(args.out, "bench_engine")

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
    for mode in args.modes.split(","):
        t0 = time.perf_counter()
        llm = LLM(
            model=mcfg,
            device=args.device,
            batch_invariant=mode == "invariant",
            num_blocks=blocks,
            max_num_seqs=max(64, max(batches)),
            max_num_batched_tokens=budget,
            chunk_size=budget,
        )
        info = llm.info()
        say(f"[{mode}] built in {time.perf_counter() - t0:.1f}s; kernels: {json.dumps(info['kernels'])}")
        wbytes = weight_bytes(llm)
        floor_ms = wbytes / bw * 1e3
        llm.generate(
            prompts_for(2, 8, mcfg.vocab_size), SamplingParams(max_tokens=4, ignore_eos=True)
        )  # warm-up / JIT
        ref_tokens = None
        for b in batches:
            prompts = prompts_for(b, prompt_len, mcfg.vocab_size)
            secs, steps, toks, seen = run_batch(llm, prompts, params, args.device)
            if b == 1 or ref_tokens is None:
                ref_tokens = run_batch(llm, prompts[:1], params, args.device)[2] if b != 1 else toks
            fork = next((i for i, (x, y) in enumerate(zip(toks, ref_tokens, strict=True)) if x != y), None)
            tps = b * max_tokens / secs
            step_ms = statistics.median(steps) * 1e3 if steps else float("nan")
            results[(mode, b)] = tps
            verdict = "invariant" if fork is None else "divergent"
            say(
                f"[{mode}] batch {b}: {tps:.1f} tok/s, decode step {step_ms:.2f} ms (floor {floor_ms:.2f} ms), request 0 vs batch 1: {verdict} (fork {fork}), max batch {seen}"
            )
            rows.append((mode, b, tps, step_ms, floor_ms, verdict, fork))
            writer.write(
                case=f"{args.model}-{args.device}-{mode}-b{b}",
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
                },
                verdict=verdict,
                evidence={
                    "probe": "request 0 at batch b vs alone",
                    "first_fork": fork,
                    "max_batch_seen": seen,
                },
                cost={
                    "tokens_per_s": tps,
                    "seconds": secs,
                    "decode_step_ms_median": step_ms,
                    "weight_streaming_floor_ms": floor_ms,
                    "weight_bytes": wbytes,
                    "memory_bandwidth_GBps": bw / 1e9,
                    "floor_over_step": floor_ms / step_ms if steps else None,
                    "method": "wall clock of LLM.generate, synchronized; decode-only steps timed individually",
                },
                extra={"server_info": info},
            )
        del llm
        if cuda:
            torch.cuda.empty_cache()
    say("")
    say(f"{'mode':<10} {'batch':>5} {'tok/s':>10} {'step ms':>9} {'floor ms':>9} {'inv/def':>8}  probe")
    for mode, b, tps, step_ms, floor_ms, verdict, fork in rows:
        ratio = tps / results[("default", b)] if ("default", b) in results else float("nan")
        say(
            f"{mode:<10} {b:>5} {tps:>10.1f} {step_ms:>9.2f} {floor_ms:>9.2f} {ratio:>8.2f}  {verdict}{'' if fork is None else f' @{fork}'}"
        )
    log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
