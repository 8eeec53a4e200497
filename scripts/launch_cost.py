"""What ``pytest-invariance launch`` costs an engine: completion tokens/s with and without it, in one run.

Why one run, alternating: the two servers share this machine, whose load drifts (other jobs);
sending the same batch to each in turn, round after round, puts both under the same drift. A
batch of N is N concurrent requests (one connection each), every one asking for ``--max-tokens``
tokens of the same prompt with ``ignore_eos``-free greedy decoding; tokens/s is the completion
tokens the servers report (``usage``) over the batch's wall time, best round kept (the least
disturbed). One JSON line per (batch, server) goes to ``--out``, and a table to stdout.

    python scripts/launch_cost.py --server plain=URL --server launch=URL [--batches 1,8]
        [--max-tokens 32] [--rounds 3] [--out reports/cpu/launch_cost.jsonl] [--label NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

PROMPT = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau"


def _one(url: str, model: str, max_tokens: int, timeout_s: float) -> int:
    r = requests.post(f"{url}/v1/completions", timeout=timeout_s,
                      json={"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0})  # fmt: skip
    r.raise_for_status()
    return int(r.json()["usage"]["completion_tokens"])


def batch_rate(url: str, model: str, n: int, max_tokens: int, timeout_s: float) -> tuple[float, int, float]:
    """(tokens/s, tokens, seconds) of ``n`` concurrent requests."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        tokens = sum(pool.map(lambda _: _one(url, model, max_tokens, timeout_s), range(n)))
    dt = time.perf_counter() - t0
    return tokens / dt, tokens, dt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", action="append", required=True, metavar="NAME=URL")
    ap.add_argument("--model", required=True)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--label", default="transformers-serve")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    servers = dict(s.split("=", 1) for s in a.server)
    batches = [int(b) for b in a.batches.split(",")]
    best: dict[tuple[int, str], tuple[float, int, float]] = {}
    try:
        for n in batches:
            for _ in range(a.rounds):
                for name, url in servers.items():
                    got = batch_rate(url.rstrip("/"), a.model, n, a.max_tokens, a.timeout)
                    if (n, name) not in best or got[0] > best[(n, name)][0]:
                        best[(n, name)] = got
    except (requests.RequestException, KeyError, ValueError) as exc:
        print(f"launch_cost: a request failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr)  # fmt: skip
        return 1
    base = next(iter(servers))
    lines = []
    print(f"| batch | {' | '.join(f'{s} tok/s' for s in servers)} | " + " | ".join(f"{s}/{base}" for s in list(servers)[1:]) + " |")
    print("|---:|" + "---:|" * (2 * len(servers) - 1))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for n in batches:
        rates = {s: best[(n, s)][0] for s in servers}
        ratios = {s: rates[s] / rates[base] for s in list(servers)[1:]}
        print(f"| {n} | " + " | ".join(f"{r:.2f}" for r in rates.values()) + " | "
              + " | ".join(f"{x:.3f}" for x in ratios.values()) + " |")  # fmt: skip
        for s in servers:
            tok_s, tokens, secs = best[(n, s)]
            lines.append({"time": stamp, "engine": a.label, "server": s, "batch": n, "max_tokens": a.max_tokens,
                          "rounds": a.rounds, "tokens": tokens, "seconds": round(secs, 3), "tokens_per_s": round(tok_s, 3),
                          "ratio_to": base, "ratio": round(tok_s / rates[base], 4)})  # fmt: skip
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        with open(a.out, "a") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
