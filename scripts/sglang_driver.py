"""SGLang's own determinism driver, unmodified, against the bundled engine in both modes.

Why: every other e2e verdict comes from our own harness; this one comes from a client nobody here
wrote. ``sglang/test/test_deterministic.py`` is fetched from the pinned ``sglang`` wheel on PyPI
(``pip download --no-deps``) into a temporary directory at run time, with the two files it needs
(``sglang/profiler.py`` for its one import, ``sglang/test/long_prompt.txt``). No ``__init__.py`` is
extracted, so ``sglang`` resolves as a namespace package and none of SGLang's runtime is imported.
Nothing of the wheel is kept in the repository.

The driver draws which prompt each batch slot gets from Python's global ``random`` without a seed;
it is run through ``runpy`` after ``random.seed(--seed)``, so a CI run is reproducible (the driver's
code is not touched). Both engines run with ``--prefix-cache`` (SGLang serves with its radix cache
on), one after the other. Expectations: ``Unique samples`` 1 in invariant mode and > 1 in default
mode in single and prefix mode; in invariant mode radix_cache passes (after a cache hit this script
proves through ``meta_info.cached_tokens``) and p_vs_d matches every sequence.

Exit status: 0 all expectations held, 1 one failed, 2 bad use or a broken run; a wheel that cannot
be fetched is a loud ``SKIPPED`` and status 0 (``--require-wheel`` makes it status 2).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

SGLANG_VERSION = "0.5.23"
DRIVER = "sglang/test/test_deterministic.py"
NEEDED = (DRIVER, "sglang/test/long_prompt.txt", "sglang/profiler.py")
# The wheel's pure-Python files are the same for every tag; one fixed tag makes the fetch
# independent of the local interpreter.
WHEEL_TAG = ("--python-version", "3.11", "--platform", "manylinux_2_34_x86_64", "--only-binary=:all:")

SINGLE = re.compile(r"^Total samples: (\d+), Unique samples: (\d+)\s*$", re.M)
PREFIX = re.compile(r"^Prompt (\d+) with prefix length (\d+): total samples: (\d+), Unique samples: (\d+)\s*$", re.M)
# Seeds only prefix mode's choice of prompt per batch slot (the other modes seed themselves or draw
# nothing). With 4 trials (batch sizes 1-4, 10 samples) seed 7 gives prefix lengths 1, 511, 2048,
# 4097 five, two, two and one samples: three prompts compared, the longest in one batch's company.
# Chosen for time before any result was seen: a 4097-character prefill takes ~40 s in invariant
# mode on 2 loaded cores (reference attention), so seed 0's 1/1/3/5 cost minutes.
PREFIX_SEED = 7
RADIX_PROMPT = re.compile(r"^Using Prompt: \[([\d, ]+)\]\s*$", re.M)


class DriverError(RuntimeError):
    """The driver's run or output is unusable (not an expectation that failed)."""


@dataclass
class Result:
    """One driver mode against one engine mode: what it printed, parsed, and whether it met the bar."""

    engine_mode: str
    test_mode: str
    seconds: float
    summary: dict
    lines: list[str]
    ok: bool
    why: str = ""
    extra: dict = field(default_factory=dict)


# --- fetching ------------------------------------------------------------------------------------


def fetch_wheel(dest: Path, version: str, timeout_s: float) -> Path:
    """``pip download --no-deps sglang==VERSION`` into dest; OSError with pip's last line if it fails."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "-q", "-d", str(dest), *WHEEL_TAG, f"sglang=={version}"]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise OSError(f"pip download sglang=={version} took longer than {timeout_s:g} s") from None
    wheels = sorted(dest.glob(f"sglang-{version}-*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OSError(f"pip download sglang=={version} failed (status {proc.returncode}): {tail}")
    return wheels[0]


def extract_driver(wheel: Path, dest: Path) -> dict[str, str]:
    """Extract the driver, its prompt and the profiler it imports; sha256 of each, for the record."""
    digests = {}
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        missing = [n for n in NEEDED if n not in names]
        if missing:
            found = sorted(n for n in names if "determin" in n)
            raise DriverError(f"{wheel.name} lacks {', '.join(missing)} (files named *determin*: {found})")
        for name in NEEDED:
            data = z.read(name)
            out = dest / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            digests[name] = hashlib.sha256(data).hexdigest()
    return digests


# --- running -------------------------------------------------------------------------------------


def driver_command(seed: int, args: list[str]) -> list[str]:
    """The driver as ``python -m sglang.test.test_deterministic ARGS``, after ``random.seed(seed)``."""
    code = (
        "import random, runpy, sys; "
        f"random.seed({int(seed)}); "
        f"sys.argv = ['test_deterministic', *{args!r}]; "
        "runpy.run_module('sglang.test.test_deterministic', run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", code]


def run_driver(driver_dir: Path, port: int, seed: int, args: list[str], timeout_s: float) -> tuple[str, float]:
    """Run one driver mode; its stdout+stderr and the seconds it took. DriverError on failure."""
    cmd = driver_command(seed, ["--host", "127.0.0.1", "--port", str(port), *args])
    env = {**os.environ, "PYTHONPATH": str(driver_dir), "PYTHONIOENCODING": "utf-8", "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", errors="replace",
                              timeout=timeout_s, env=env, cwd=driver_dir, stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired as e:
        raise DriverError(f"driver {' '.join(args)} ran past {timeout_s:g} s") from e
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        tail = (out.strip().splitlines() or ["no output"])[-1]
        raise DriverError(f"driver {' '.join(args)} exited with status {proc.returncode}: {tail}")
    return out, time.monotonic() - t0


# --- parsing and expectations --------------------------------------------------------------------


def parse_single(text: str) -> dict:
    """``Total samples: T, Unique samples: U`` (the last such line)."""
    found = SINGLE.findall(text)
    if not found:
        raise DriverError("single mode printed no 'Total samples: ..., Unique samples: ...' line")
    total, unique = map(int, found[-1])
    return {"samples": total, "unique": unique}


def parse_prefix(text: str) -> dict:
    """Per prompt: prefix length, samples and unique samples."""
    found = PREFIX.findall(text)
    if not found:
        raise DriverError("prefix mode printed no 'Prompt k with prefix length L: ...' line")
    prompts = [{"prefix_length": int(n), "samples": int(t), "unique": int(u)} for _, n, t, u in found]
    return {"prompts": prompts}


def parse_radix(text: str) -> dict:
    """Whether the cached and the uncached prefill agreed, and the prompt it used."""
    passed, failed = "TEST PASSED" in text, "TEST FAILED" in text
    if passed == failed:
        raise DriverError("radix_cache mode printed neither 'TEST PASSED' nor 'TEST FAILED'")
    prompts = RADIX_PROMPT.findall(text)
    ids = [int(x) for x in prompts[-1].split(",")] if prompts else []
    return {"consistent": passed, "prompt_tokens": len(ids), "prompt_ids": ids}


def parse_p_vs_d(text: str) -> dict:
    """Sequences compared, and how many matched in tokens and in logprobs (decode vs prefill)."""
    compared = text.count("Compare sequence ")
    if not compared:
        raise DriverError("p_vs_d mode compared no sequence")
    return {
        "sequences": compared,
        "token_match": text.count("Token match"),
        "logprob_match": text.count("Logprobs match"),
    }


PARSERS = {"single": parse_single, "prefix": parse_prefix, "radix_cache": parse_radix, "p_vs_d": parse_p_vs_d}


def expectation(engine_mode: str, test_mode: str, summary: dict) -> tuple[bool, str]:
    """(met, why not): invariant mode identical everywhere, default mode divergent in single/prefix."""
    invariant = engine_mode == "invariant"
    if test_mode == "single":
        if summary["samples"] < 2:
            return False, f"only {summary['samples']} samples: nothing to compare"
        if invariant:
            return summary["unique"] == 1, f"{summary['unique']} unique samples, expected 1"
        return summary["unique"] > 1, "1 unique sample, expected > 1 (the default mode did not diverge)"
    if test_mode == "prefix":
        ps = summary["prompts"]
        if max(p["samples"] for p in ps) < 2:
            return False, "no prompt got 2 samples: nothing to compare"
        if invariant:
            bad = [p for p in ps if p["samples"] and p["unique"] != 1]
            return not bad, f"prefix lengths {[p['prefix_length'] for p in bad]} gave > 1 unique samples"
        return max(p["unique"] for p in ps) > 1, "every prompt gave 1 unique sample, expected > 1 for one"
    if not invariant:
        return True, ""  # radix_cache and p_vs_d in default mode are reported, not judged
    if test_mode == "radix_cache":
        if not summary.get("cache_hit"):
            return False, "no cache hit was proven for the driver's prompt"
        return summary["consistent"], "cached and uncached prefill differ"
    same = summary["token_match"] == summary["logprob_match"] == summary["sequences"]
    return same, f"{summary['logprob_match']} of {summary['sequences']} sequences matched"


def cache_hit(base_url: str, ids: list[int]) -> int | None:
    """``meta_info.cached_tokens`` of the driver's radix prompt sent twice (None: not reported)."""
    import requests

    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    counts = []
    for _ in range(2):
        r = requests.post(base_url + "/generate", json=body, timeout=60)
        r.raise_for_status()
        counts.append(r.json()["meta_info"].get("cached_tokens"))
    return counts[-1]


def report_lines(test_mode: str, text: str) -> list[str]:
    """The driver's own summary lines, as it printed them."""
    keep = ("Total samples", "Unique samples", "TEST PASSED", "TEST FAILED", "Logprobs match",
            "Logprobs mismatch", "Token mismatch")  # fmt: skip
    return [line for line in text.splitlines() if any(k in line for k in keep)]


# --- main ----------------------------------------------------------------------------------------


def mode_args(a: argparse.Namespace) -> dict[str, list[str]]:
    """Driver flags per test mode (fewer trials than the driver's default 50, to bound the time)."""
    tok = ["--max-new-tokens", str(a.max_new_tokens)]
    return {
        "single": ["--test-mode", "single", "--n-trials", str(a.single_trials), *tok],
        "prefix": ["--test-mode", "prefix", "--n-trials", str(a.prefix_trials), *tok],
        "radix_cache": ["--test-mode", "radix_cache"],
        "p_vs_d": ["--test-mode", "p_vs_d", "--n-trials", str(a.p_vs_d_trials), *tok],
    }


def run_engine_mode(a: argparse.Namespace, driver_dir: Path, invariant: bool, out: Path) -> list[Result]:
    """Start the bundled engine in one mode, run every selected driver mode against it, stop it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pytest_invariance.adapters.bundled import BundledEngine

    engine_mode = "invariant" if invariant else "default"
    engine = BundledEngine(invariant=invariant, extra_args=["--prefix-cache"], log_dir=out, threads=a.threads)
    results = []
    with engine:
        port = int(engine.base_url.rsplit(":", 1)[1])
        for test_mode, args in mode_args(a).items():
            if test_mode not in a.modes:
                continue
            left = a.deadline - time.monotonic()
            if left < 1:
                raise DriverError(f"the whole run's budget of {a.budget:g} s is spent before {engine_mode} {test_mode}")
            text, seconds = run_driver(driver_dir, port, a.seed, args, min(a.timeout, left))
            (out / f"driver-{engine_mode}-{test_mode}.log").write_text(text, encoding="utf-8")
            summary = PARSERS[test_mode](text)
            if test_mode == "radix_cache" and summary["prompt_ids"]:
                summary["cache_hit"] = (cache_hit(engine.base_url, summary["prompt_ids"]) or 0) > 0
            summary.pop("prompt_ids", None)
            ok, why = expectation(engine_mode, test_mode, summary)
            r = Result(engine_mode, test_mode, seconds, summary, report_lines(test_mode, text), ok, "" if ok else why)
            print(f"[{engine_mode}] {test_mode}: {'ok' if ok else 'FAILED: ' + why} ({seconds:.1f} s)", flush=True)
            for line in r.lines:
                print(f"    {line}", flush=True)
            results.append(r)
    return results


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--version", default=SGLANG_VERSION, help=f"sglang wheel version (default {SGLANG_VERSION})")
    p.add_argument("--wheel", type=Path, default=None, help="use this sglang wheel instead of downloading")
    p.add_argument("--out", type=Path, default=None, help="logs and summary.json (default: a temp dir)")
    p.add_argument("--modes", default="single,prefix,radix_cache,p_vs_d")
    p.add_argument("--engine-modes", default="invariant,default")
    p.add_argument("--single-trials", type=int, default=10)
    p.add_argument("--prefix-trials", type=int, default=4)
    p.add_argument("--p-vs-d-trials", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=100, help="the driver's default is 100")
    p.add_argument("--seed", type=int, default=PREFIX_SEED, help=f"random.seed before the driver runs (default {PREFIX_SEED})")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per driver run")
    p.add_argument("--budget", type=float, default=900.0, help="seconds for the whole run (download excluded)")
    p.add_argument("--download-timeout", type=float, default=300.0)
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the engine")
    p.add_argument("--require-wheel", action="store_true", help="a wheel that cannot be fetched is an error")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    a.modes = [m for m in a.modes.split(",") if m]
    engine_modes = [m for m in a.engine_modes.split(",") if m]
    bad = [m for m in a.modes if m not in PARSERS] + [m for m in engine_modes if m not in ("invariant", "default")]
    if bad or min(a.single_trials, a.prefix_trials, a.p_vs_d_trials) < 1:
        print(f"sglang_driver: error: unknown mode(s) {bad} or a trial count below 1", file=sys.stderr)
        return 2
    out = a.out or Path(tempfile.mkdtemp(prefix="sglang-driver-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sglang-wheel-") as tmp:
        try:
            wheel = a.wheel or fetch_wheel(Path(tmp), a.version, a.download_timeout)
        except OSError as e:
            bar = "!" * 100
            print(f"{bar}\nsglang_driver: SKIPPED, the sglang wheel could not be fetched: {e}\n{bar}", file=sys.stderr)
            return 2 if a.require_wheel else 0
        driver_dir = Path(tmp) / "driver"
        t0 = time.monotonic()
        a.deadline = t0 + a.budget
        try:
            digests = extract_driver(wheel, driver_dir)
            print(f"sglang_driver: {wheel.name}, {DRIVER} sha256 {digests[DRIVER][:16]}", flush=True)
            results = []
            for mode in engine_modes:
                results += run_engine_mode(a, driver_dir, mode == "invariant", out)
        except (DriverError, RuntimeError, OSError, zipfile.BadZipFile) as e:
            print(f"sglang_driver: error: {e} (logs in {out})", file=sys.stderr)
            return 2
    failed = [r for r in results if not r.ok]
    summary = {
        "wheel": wheel.name,
        "sha256": digests,
        "seed": a.seed,
        "seconds": round(time.monotonic() - t0, 1),
        "results": [r.__dict__ for r in results],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    verdict = "FAILED: " + "; ".join(f"{r.engine_mode} {r.test_mode}: {r.why}" for r in failed) if failed else "ok"
    print(f"sglang_driver: {verdict} ({summary['seconds']} s, logs in {out})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
