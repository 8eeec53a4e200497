"""Overload that always answers: a burst of raw clients against the bundled engine under a given
descriptor limit, counting connection resets apart from 503s.

It starts ``pytest-invariance serve`` (tiny random model) in a subprocess whose ``RLIMIT_NOFILE``
is the given limit, optionally opens an idle-socket flood first, then starts the burst and, in its
tail, one more valid request. One row per (limit, idle, run): 200 / 503 + Retry-After / other /
no status, the tail request's answer and latency, and the KV blocks free afterwards.

    python benchmarks/bench_overload.py --limits 256,1024,8192 --clients 1000 --runs 3 \\
        [--idle 0,1100] [--out reports/cpu/overload.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from burst_openai import cpu_model  # noqa: E402
from served import served  # noqa: E402

from pytest_invariance.engine.overload_probe import burst_with_tail_probe  # noqa: E402


def _limit(n: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def run_one(limit: int, clients: int, idle: int, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp, served(["--log-level", "warning"], Path(tmp) / "log",
                                                        _limit(limit)) as (base, proc):  # fmt: skip
        port = int(base.rsplit(":", 1)[1])
        report = asyncio.run(burst_with_tail_probe("127.0.0.1", port, clients, idle=idle, timeout_s=timeout_s))
        deadline = time.monotonic() + 30
        while (kv := requests.get(base + "/server_info", timeout=10).json()["kv_blocks"])["used"]:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        log = (Path(tmp) / "log").read_text()
        return {"limit": limit, "clients": clients, "idle": idle, **{f"n_{k}": v for k, v in report.counts().items()},
                "without_status": report.without_status(), "idle_answered_503": report.idle_answered_503, "tail_kind": report.tail_probe.kind,
                "client_timeout_s": timeout_s, "max_latency_s": round(max(o.latency_s for o in report.outcomes), 2),
                "tail_s": round(report.tail_probe.latency_s, 3),
                "tail_health_kind": report.tail_health.kind, "tail_health_s": round(report.tail_health.latency_s, 3), "wall_s": round(report.wall_s, 2),
                "kv_free_after": kv["free"], "kv_total": kv["total"], "alive": proc.poll() is None,
                "emfile_in_log": "Too many open files" in log, "cpu": cpu_model(),
                "date": time.strftime("%Y-%m-%d", time.gmtime())}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", default="256,1024,8192")
    ap.add_argument("--idle", default="0", help="comma list of idle-socket flood sizes opened before the burst")
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0, help="each client's wait for its answer, s")
    ap.add_argument("--out", default=None, help="append one JSON line per run")
    args = ap.parse_args(argv)
    rows = []
    for limit in (int(x) for x in args.limits.split(",")):
        for idle in (int(x) for x in args.idle.split(",")):
            for _ in range(args.runs):
                row = run_one(limit, args.clients, idle, args.timeout)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(row) + "\n")
    worst = max(r["without_status"] for r in rows)
    print(f"clients without an HTTP status, worst run: {worst}")
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
