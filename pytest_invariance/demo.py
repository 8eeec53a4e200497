"""``make demo``: measure this machine and write the compatibility matrix.

Runs the shipped per-op suites on the local device with records and a report
directory, then prints where the matrix is. The records file is rewritten on
each demo run so the matrix shows this run only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pytest-invariance demo", description=__doc__)
    ap.add_argument("--out", default="reports/demo", help="directory for records and matrix (default %(default)s)")
    ap.add_argument("--profile", choices=("quick", "full"), default="quick")
    ap.add_argument("-n", "--workers", default="2", help="pytest-xdist workers (default %(default)s)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = out / "records.jsonl"
    if records.exists():
        records.unlink()
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "pytest_invariance.suites.ops", "-q", "-p", "no:cacheprovider",
        "-n", args.workers, f"--invariance-profile={args.profile}",
        f"--invariance-records={records}", f"--invariance-report={out}",
    ]
    print("demo:", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if (out / "matrix.md").exists():
        print(f"\ndemo: matrix written to {out}/matrix.md, matrix.html, matrix.csv, matrix.json")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
