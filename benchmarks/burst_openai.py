"""Bursts of one greedy prompt through the official ``openai`` client, in both modes of the bundled engine.

The check a serving team makes first: send the same greedy request N times at once and count the
distinct completions. It runs the bundled engine as a real server (a subprocess on a loopback
port), sends bursts of 1..32 concurrent requests for each prompt, and prints per mode and burst
size the distinct texts and the distinct (token ids, logprob bits) pairs. Default mode must show
more than one somewhere, invariant mode exactly one everywhere.

    python benchmarks/burst_openai.py [--max-tokens 48] [--out reports/cpu/burst_openai.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
from pathlib import Path

BURSTS = (1, 2, 4, 8, 16, 32)
PROMPTS = ("The quick brown fox", "Once upon a time, in a batch far away")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


async def burst(base: str, prompt: str, n: int, max_tokens: int) -> tuple[int, int]:
    import openai

    async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=300) as c:

        async def one() -> tuple[str, tuple]:
            r = await c.completions.create(
                model="x", prompt=prompt, max_tokens=max_tokens, temperature=0, logprobs=0
            )
            ch = r.choices[0]
            return ch.text, (tuple(ch.model_extra["token_ids"]), tuple(ch.logprobs.token_logprobs))

        got = await asyncio.gather(*(one() for _ in range(n)))
    return len({t for t, _ in got}), len({b for _, b in got})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out", default=None, help="append one JSON line per (mode, prompt, burst)")
    args = ap.parse_args(argv)
    from pytest_invariance.adapters.bundled import BundledEngine

    rows = []
    for invariant in (False, True):
        mode = "invariant" if invariant else "default"
        with BundledEngine(invariant=invariant) as adapter:
            for prompt in PROMPTS:
                for n in BURSTS:
                    texts, exact = asyncio.run(burst(adapter.base_url, prompt, n, args.max_tokens))
                    rows.append({"mode": mode, "prompt": prompt, "burst": n, "distinct_texts": texts,
                                 "distinct_exact": exact, "max_tokens": args.max_tokens,
                                 "cpu": cpu_model()})  # fmt: skip
    if args.out:
        with open(args.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    print(f"cpu: {cpu_model()}; greedy, {args.max_tokens} tokens, bursts {list(BURSTS)}")
    print(f"{'mode':<10} {'prompt':<40} distinct texts per burst / distinct (ids, logprob bits)")
    for mode in ("default", "invariant"):
        for prompt in PROMPTS:
            sel = [r for r in rows if r["mode"] == mode and r["prompt"] == prompt]
            texts = " ".join(str(r["distinct_texts"]) for r in sel)
            exact = " ".join(str(r["distinct_exact"]) for r in sel)
            print(f"{mode:<10} {prompt:<40} {texts}  /  {exact}")
    worst = {m: max(r["distinct_texts"] for r in rows if r["mode"] == m) for m in ("default", "invariant")}
    ok = worst["default"] > 1 and all(r["distinct_exact"] == 1 for r in rows if r["mode"] == "invariant")
    print("result:", "as expected" if ok else f"UNEXPECTED (max distinct texts {worst})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
