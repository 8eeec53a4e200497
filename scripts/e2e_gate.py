"""Judge one real-engine e2e run by its records, then keep them; or record a mode that cannot run.

Why a gate and not pytest's exit code: against a real engine in default mode the inverse tests
*should* find divergence, and where a sweep finds none (a cache that really is bitwise equal) the
test fails with ``vacuous``: a true finding, not a broken harness. What is a broken harness:
pytest itself erring (exit 2-4), no records, a record ``incomplete`` (the harness could not finish
talking to the engine), a record missing the target's identity (model, dtype, version), or no
``divergent`` verdict at all on an engine known to be batch-variant here.

    python scripts/e2e_gate.py check RUN.jsonl --implementation vllm --pytest-rc N [--append-to F]
        [--require model,dtype,version] [--no-need-divergent] [--need-invariant]
    python scripts/e2e_gate.py unsupported --implementation vllm --mode invariant --reason TEXT
        --append-to F [--version V] [--model M] [--dtype D]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from pytest_invariance import hardware
from pytest_invariance.recordio import RecordFileError, append_records, read_records
from pytest_invariance.records import make_record, new_run_id


def _identity(rec: dict, required: tuple[str, ...]) -> list[str]:
    """The identity fields a real-engine record must carry; names the missing ones."""
    info = (rec.get("extra") or {}).get("server_info") or {}
    have = {"model": (rec.get("shape") or {}).get("model"), "dtype": rec.get("dtype"), "version": info.get("version")}
    return [k for k in required if not have.get(k)]


def check(path: str, implementation: str, pytest_rc: int, need_divergent: bool = True,
          required: tuple[str, ...] = ("model", "dtype", "version"),
          need_invariant: bool = False) -> tuple[int, list[dict]]:  # fmt: skip
    """(exit code, the run's records): prints one line per record and one line per problem."""
    try:
        recs, problems = read_records(path)
    except RecordFileError as exc:
        print(f"e2e_gate: {exc}", file=sys.stderr)
        return 1, []
    bad = [f"pytest exited {pytest_rc} (an error, not a test failure)"] if pytest_rc not in (0, 1) else []
    bad += [str(p) for p in problems]
    ours = [r for r in recs if str(r.get("implementation", "")).startswith(implementation)]
    if not ours:
        bad.append(f"no records for implementation {implementation} in {path}")
    for r in ours:
        ev = r.get("evidence") or {}
        summary = (r.get("extra") or {}).get("summary") or ev.get("error") or ""
        print(f"  {r['verdict']:<11} {(r.get('shape') or {}).get('sweep') or r['oracle']:<16} "
              f"[{r.get('mode')}] {summary[:150]}")  # fmt: skip
        if r["verdict"] == "incomplete":
            bad.append(f"{r['nodeid']}: incomplete: {summary}")
        if missing := _identity(r, required):
            bad.append(f"{r['nodeid']}: record lacks the target's {', '.join(missing)}")
    counts = Counter(r["verdict"] for r in ours)
    print(f"e2e_gate: {implementation}: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())))
    if need_divergent and ours and not counts.get("divergent"):
        bad.append(f"no divergent verdict on {implementation}, which is batch-variant here")
    if need_invariant and ours and not counts.get("invariant"):
        bad.append(f"no invariant verdict on {implementation}, which runs under the reference kernels here")
    for line in bad:
        print(f"e2e_gate: FAIL: {line}", file=sys.stderr)
    return (1 if bad else 0), ours


def unsupported(a: argparse.Namespace) -> dict:
    """A record saying the mode cannot run here, and why (its one line from the engine's log)."""
    shape = {"sweep": "server start", "model": a.model}
    return make_record(run_id=new_run_id(), fingerprint=hardware.fingerprint(), family="engine",
                       implementation=a.implementation, oracle="unique-samples", verdict="unsupported",
                       nodeid=f"scripts/e2e_gate.py::{a.implementation}[{a.mode}]", mode=a.mode,
                       quantization=a.dtype and a.dtype.replace("bfloat16", "bf16"), dtype=a.dtype,
                       shape=shape, evidence={"reason": a.reason},
                       extra={"summary": f"unsupported: {a.reason}", "server_info": {"version": a.version},
                              "role": "target", "expect": "invariant"})  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("records")
    c.add_argument("--implementation", required=True)
    c.add_argument("--pytest-rc", type=int, required=True)
    c.add_argument("--append-to")
    c.add_argument("--no-need-divergent", action="store_true")
    c.add_argument("--need-invariant", action="store_true", help="fail unless some record is invariant")
    c.add_argument("--require", default="model,dtype,version", help="identity fields every record must carry")
    u = sub.add_parser("unsupported")
    for name in ("--implementation", "--mode", "--reason", "--append-to"):
        u.add_argument(name, required=True)
    for name in ("--version", "--model", "--dtype"):
        u.add_argument(name)
    a = ap.parse_args(argv)
    if a.cmd == "unsupported":
        append_records(a.append_to, [unsupported(a)])
        print(f"e2e_gate: recorded {a.implementation} [{a.mode}] unsupported: {a.reason}")
        return 0
    required = tuple(x for x in a.require.split(",") if x)
    rc, ours = check(a.records, a.implementation, a.pytest_rc, not a.no_need_divergent, required, a.need_invariant)
    if a.append_to and ours:
        n = append_records(a.append_to, ours)
        print(f"e2e_gate: appended {n} records to {a.append_to}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
