"""``make demo``: the bundled engine in default and in invariant mode, the quick e2e sweeps, a matrix.

Starts both engines as subprocesses, runs the shipped e2e suites against them (the invariant one as
``--invariance-url``, the default one as ``--invariance-url-control``), writes records.jsonl,
matrix.md and matrix.html (plots) into ``--out`` and prints one line per mode a person can read at a
glance, e.g. ``default: 31 samples, 3 unique, first divergence at token 5 (near-tie)``. The records
file is rewritten on each run so the matrix shows this run only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from pytest_invariance.oracles.classes import format_ranges

QUICK_SWEEPS = ("single", "needle", "mixed", "logprobs", "prefill_decode")
# Default mode with one designed mechanism at a time (and neither): which one made it diverge.
# (The single sweep's probe is short and never chunked, so cascade prefix attention is off in all.)
_OFF = {"gemm": ["--gemm-strategy", "one-pass"], "kv": ["--split-kv", "none"],
        "cascade": ["--prefix-attention", "one-pass"]}  # fmt: skip
ABLATIONS = (
    ("gemm m-bucket split-K only", _OFF["kv"] + _OFF["cascade"]),
    ("split-KV decode only", _OFF["gemm"] + _OFF["cascade"]),
    ("none (stock kernels only)", _OFF["gemm"] + _OFF["kv"] + _OFF["cascade"]),
)


def _pytest_cmd(out: Path, target: str, control: str, sweeps: list[str], profile: str) -> list[str]:
    names = " or ".join(f"test_{s}" for s in sweeps)
    inverse = " or ".join(f"test_inverse[{s.replace('_', '-')}]" for s in sweeps)
    return [
        sys.executable, "-m", "pytest", "--pyargs", "pytest_invariance.suites.e2e", "-q", "-p", "no:cacheprovider",
        "-p", "no:xdist", "-k", f"{names} or {inverse}", f"--invariance-profile={profile}",
        f"--invariance-url={target}", f"--invariance-url-control={control}", "--invariance-engine=bundled",
        f"--invariance-records={out / 'records.jsonl'}", f"--invariance-report={out}",
    ]  # fmt: skip


def summarize(records: list[dict]) -> list[str]:
    """One line per mode from the ``single`` sweep's record (the control's evidence rides on it)."""
    lines = []
    for rec in records:
        shape = rec.get("shape") or {}
        if (
            rec.get("family") != "engine"
            or shape.get("sweep") != "single"
            or (rec.get("extra") or {}).get("inverse")
        ):
            continue
        ctl = rec.get("control") or {}
        if ctl.get("evidence"):
            lines.append(f"default:   {_line(ctl['evidence'])}")
        lines.append(
            f"{rec.get('mode') or 'invariant'}: {_line(rec.get('evidence') or {})}   -> verdict {rec['verdict']}"
        )
    return lines


def _mechanisms(records: list[dict]) -> list[str]:
    """``batch_mechanisms`` the default-mode engine reported (from the control's server info)."""
    for rec in records:
        info = (rec.get("extra") or {}).get("server_info") or {}
        if info.get("mode") == "default" and info.get("batch_mechanisms"):
            return list(info["batch_mechanisms"])
    return []


def _line(ev: dict) -> str:
    text = f"{ev.get('samples')} samples, {ev.get('unique')} unique"
    if isinstance(ev.get("unique"), int) and ev["unique"] > 1:
        text += f", first divergence at token {ev.get('first_divergence')}"
        if ev.get("margin_class"):
            text += f" ({ev['margin_class']})"
        first = ev.get("first") or {}
        if first.get("batch_size"):
            text += f", from concurrency {first['batch_size']}"
    elif ev.get("bitwise_differing_samples"):
        d = ev.get("first_bitwise_difference") or {}
        text += (f" by token ids, but {ev['bitwise_differing_samples']} differ in logprob bits"
                 f" (first at concurrency {d.get('concurrency')}, step {d.get('step')})")  # fmt: skip
    if ev.get("equivalence_classes"):
        text += f"; concurrency classes {format_ranges(ev['equivalence_classes'])}"
    return text


def ablation_lines(logs: Path, profile: str) -> list[str]:
    """The single sweep on default-mode engines with one mechanism switched on at a time."""
    from pytest_invariance.adapters.base import AdapterError
    from pytest_invariance.adapters.bundled import BundledEngine
    from pytest_invariance.e2e import Target, sweep_single

    lines = []
    for label, args in ABLATIONS:
        eng = BundledEngine(invariant=False, extra_args=args, log_dir=logs)
        try:
            t = Target(eng.start(), "control", "default")
            t.refresh()
            out = sweep_single(t, profile, 0)
        except (RuntimeError, AdapterError) as exc:
            lines.append(f"{label:<30} error: {exc}")
            continue
        finally:
            eng.stop()
        lines.append(f"{label:<30} {_line(out.evidence)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pytest-invariance demo", description=__doc__)
    ap.add_argument(
        "--out", default="reports/demo", help="directory for records and matrix (default %(default)s)"
    )
    ap.add_argument("--profile", choices=("quick", "full"), default="quick")
    ap.add_argument("--sweeps", default=",".join(QUICK_SWEEPS),
                    help="comma-separated e2e sweeps (default %(default)s)")  # fmt: skip
    ap.add_argument("--no-ablation", action="store_true",
                    help="skip the per-mechanism single sweeps that name what made default mode diverge")  # fmt: skip
    args = ap.parse_args(argv)
    from pytest_invariance.adapters.bundled import BundledEngine, EngineUnavailable

    sweeps = [s.strip().replace("-", "_") for s in args.sweeps.split(",") if s.strip()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = out / "records.jsonl"
    if records.exists():
        records.unlink()
    t0 = time.monotonic()
    logs = out / "logs"
    pytest_log = logs / "pytest.log"
    inv, dflt = BundledEngine(invariant=True, log_dir=logs), BundledEngine(invariant=False, log_dir=logs)
    try:
        print("demo: starting the bundled engine in invariant and in default mode ...", flush=True)
        a_inv, a_def = inv.start(), dflt.start()
        cmd = _pytest_cmd(out, a_inv.base_url, a_def.base_url, sweeps, args.profile)
        logs.mkdir(parents=True, exist_ok=True)
        print(f"demo: running {len(sweeps)} sweeps and their inverse checks; pytest's output: {pytest_log}", flush=True)
        with open(pytest_log, "w", encoding="utf-8") as log:
            log.write(" ".join(cmd) + "\n")
            log.flush()
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    except EngineUnavailable as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 1
    finally:
        inv.stop()
        dflt.stop()
    recs = (
        [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
        if records.exists()
        else []
    )
    ablation = [] if args.no_ablation else ablation_lines(logs, args.profile)
    print("\n=== pytest-invariance demo: one prompt, batches of 1..64 copies in one request, greedy ===")
    for line in summarize(recs) or [f"(no single-sweep record: see {pytest_log})"]:
        print("  " + line)
    mechs = _mechanisms(recs)
    if mechs:
        print("  default mode's designed batch-dependent mechanisms: " + "; ".join(mechs))
    if ablation:
        print("  which mechanism made default mode diverge (single sweep, one switched on at a time):")
        for line in ablation:
            print("    " + line)
    print(f"records: {records}\nmatrix:  {out / 'matrix.md'}, {out / 'matrix.html'} (plots)")
    print("\n--- details: pytest's summary (the whole output is in " + str(pytest_log) + ") ---")
    print(_pytest_summary(pytest_log))
    print(f"demo finished in {time.monotonic() - t0:.0f} s, pytest exit status {rc}")
    return rc


def _pytest_summary(log: Path) -> str:
    """The invariance summary and the result line: what a reader wants after the demo's own lines."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(pytest's output could not be read: {exc})"
    marker = text.find("invariance summary")
    tail = text[text.rfind("\n", 0, marker) + 1 :] if marker >= 0 else "\n".join(text.splitlines()[-15:])
    return tail.rstrip()


if __name__ == "__main__":
    raise SystemExit(main())
