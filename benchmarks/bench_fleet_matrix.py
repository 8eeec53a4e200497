"""A fleet's records, synthesized, and the ``pytest-invariance matrix`` CLI timed on them.

Why: the matrix must render the records a fleet of CI machines appends over months. This writes
N records replayed from real ones (by default the committed ``reports/*/records.jsonl``: GPU
records on GPU machines, CPU records on CPU machines), as M machines each running the full suite
once per "day", upgrading their software stack at evenly spaced days, then runs the CLI in a child
process and reports its wall time, peak RSS (``ru_maxrss`` of the child) and the size of
matrix.html. Every machine is its own hardware class unless ``--classes`` groups them, so the
default is the widest matrix (M columns).

    python benchmarks/bench_fleet_matrix.py --records 1000000 --machines 20 --stacks 3

The machine is shared: the output says the load average before and after, one run per call.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

GPU_MODELS = (("NVIDIA H200", "9.0", 132), ("NVIDIA H100 80GB HBM3", "9.0", 132), ("NVIDIA A100-SXM4-80GB", "8.0", 108),
              ("NVIDIA L40S", "8.9", 142))  # fmt: skip
CPU_MODELS = (("Intel(R) Xeon(R) Processor", "AVX512"), ("Intel(R) Xeon(R) Processor", "AVX2"), ("AMD EPYC 9654", "AVX512"),
              ("AMD EPYC 7763", "AVX2"))  # fmt: skip
STACKS = (("2.11.0", "3.6.0", "580.65"), ("2.12.0", "3.7.0", "580.82"), ("2.13.0", "3.9.0", "590.10"),
          ("2.14.0", "3.10.0", "590.31"))  # fmt: skip


def _templates(paths: list[str]) -> tuple[list[dict], list[dict]]:
    gpu, cpu = [], []
    for path in paths:
        with open(path, "rb") as fh:
            for line in fh:
                if line.strip():
                    rec = orjson.loads(line)
                    (gpu if (rec.get("hardware") or {}).get("kind") == "cuda" else cpu).append(rec)
    return gpu, cpu


def _machine(i: int, machines: int, classes: int) -> dict:
    """Machine i's hardware: 60% GPU hosts, the rest CPU hosts; ``classes`` distinct classes."""
    c = i % classes
    gpu = i < round(machines * 0.6)
    if gpu:
        name, cc, sms = GPU_MODELS[c % len(GPU_MODELS)]
        suffix = f" #{c}" if classes > len(GPU_MODELS) else ""
        return {"name": name + suffix, "kind": "cuda", "device_count": 8, "compute_capability": cc, "sm_count": sms,
                "memory_gib": 139.8, "gpu_index": i % 8, "gpu_uuid": f"GPU-{i:08x}", "cpu_model": "Intel(R) Xeon(R)",
                "cores": 64, "isa": "AVX512", "amx": False, "cuda": "13.0"}  # fmt: skip
    name, isa = CPU_MODELS[c % len(CPU_MODELS)]
    suffix = f" #{c}" if classes > len(CPU_MODELS) else ""
    return {"name": name + suffix, "kind": "cpu", "device_count": 0, "cpu_model": name, "cores": 2, "isa": isa, "amx": False}


def _software(stack: tuple, kind: str) -> dict:
    torch, triton, _ = stack
    sw = {"python": "3.12.3", "platform": "Linux-x86_64", "pytest_invariance": "0.1.0", "triton": triton,
          "torch": f"{torch}+cu130" if kind == "cuda" else f"{torch}+cpu", "cublas": None, "cudnn": None, "nccl": None}  # fmt: skip
    if kind == "cuda":
        sw.update(cublas="13.0.0.19", cudnn="91002", nccl="2.27.3")
    return sw


def generate(out: Path, n: int, machines: int, stacks: int, classes: int, templates: list[str]) -> dict:
    """Write ``n`` records to ``out``; returns what was written."""
    gpu, cpu = _templates(templates)
    if not gpu or not cpu:
        raise SystemExit("bench_fleet_matrix: the templates need both GPU and CPU records")
    hw = [_machine(i, machines, classes) for i in range(machines)]
    per_day = sum(len(gpu if h["kind"] == "cuda" else cpu) for h in hw)
    days = max(1, -(-n // per_day))
    written, day = 0, 0
    t0 = time.perf_counter()
    with out.open("wb") as fh:
        while written < n:
            stack = STACKS[min(stacks - 1, day * stacks // days)]  # the fleet upgrades at evenly spaced days
            for i, h in enumerate(hw):
                hardware = {**h, "driver": stack[2]} if h["kind"] == "cuda" else h
                software = _software(stack, h["kind"])
                run_id = f"day{day:03d}-m{i:02d}"
                stamp = f"2026-{1 + day // 28:02d}-{1 + day % 28:02d}T{i % 24:02d}:00:00+00:00"
                lines = []
                for rec in gpu if h["kind"] == "cuda" else cpu:
                    if written >= n:
                        break
                    lines.append(orjson.dumps({**rec, "hardware": hardware, "software": software, "run_id": run_id,
                                               "time": stamp}))  # fmt: skip
                    written += 1
                fh.write(b"\n".join(lines) + b"\n" if lines else b"")
                if written >= n:
                    break
            day += 1
    return {"records": written, "days": day, "machines": machines, "classes": min(classes, machines),
            "stacks": stacks, "bytes": out.stat().st_size, "generate_s": round(time.perf_counter() - t0, 1)}  # fmt: skip


def time_cli(records: Path, out_dir: Path) -> dict:
    """Run ``pytest-invariance matrix`` in a child process: wall time, peak RSS, output sizes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest_invariance.cli", "matrix", str(records), "--out", str(out_dir)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"bench_fleet_matrix: the CLI failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    sizes = {p.name: p.stat().st_size for p in sorted(out_dir.iterdir())}
    return {"wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_mb": round(max(usage.ru_maxrss, before) / 1024), "html_mb": round(sizes["matrix.html"] / 2**20, 2),
            "sizes": sizes}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000, help="how many records (default %(default)s)")
    ap.add_argument("--machines", type=int, default=20)
    ap.add_argument("--stacks", type=int, default=3, choices=range(1, len(STACKS) + 1))
    ap.add_argument("--classes", type=int, default=None, help="distinct hardware classes (default: one per machine)")
    ap.add_argument("--templates", nargs="*", default=None, help="records to replay (default reports/*/records.jsonl)")
    ap.add_argument("--workdir", default=None, help="where the records and matrix go (default a temp dir, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the generated records file")
    args = ap.parse_args(argv)
    templates = args.templates or sorted(glob.glob(str(Path(__file__).resolve().parents[1] / "reports/*/records.jsonl")))
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        records = work / "fleet.jsonl"
        made = generate(records, args.records, args.machines, args.stacks, args.classes or args.machines, templates)
        load0 = os.getloadavg()[0]
        timed = time_cli(records, work / "matrix")
        matrix = json.loads((work / "matrix" / "matrix.json").read_text())
        result = {**made, **timed, "cells": len(matrix["cells"]), "columns": len(matrix["hardware"]),
                  "changed_cells": sum(bool(c.get("changed")) for c in matrix["cells"]),
                  "loadavg_before": round(load0, 2), "loadavg_after": round(os.getloadavg()[0], 2),
                  "cpus": os.cpu_count()}  # fmt: skip
        if args.keep:
            kept = Path(args.workdir or ".") / "fleet.jsonl"
            records.replace(kept)
            result["kept"] = str(kept)
    print(json.dumps(result))
    print(f"{result['records']:,} records ({result['bytes'] / 2**30:.2f} GiB, {result['columns']} columns, "
          f"{result['stacks']} stacks): {result['wall_s']} s wall, {result['cpu_s']} s CPU, peak RSS "
          f"{result['peak_rss_mb']} MB, matrix.html {result['html_mb']} MB, {result['cells']} cells "
          f"({result['changed_cells']} changed); load average {result['loadavg_before']} -> {result['loadavg_after']} "
          f"on {result['cpus']} CPUs")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
