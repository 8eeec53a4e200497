"""The e2e zoo: the planted-bug fake engines (``pytest_invariance.fakes``) run through the shipped
e2e suites with the user's profile, seed, levels and dispatch.

Each fake is served in this process on loopback and a fresh pytest runs the shipped suites against
it by URL, as a user's CI runs them against a server; its records say what the suites saw. The
clean fake (``none``) is every class's clean twin: any ``divergent`` on it is a false alarm. The
control (``--invariance-url-control``) is a fake padded at every level but 1, so a control exists
without starting the bundled engine; it only decides ``invariant`` against ``vacuous`` on the twin.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pytest_invariance.oracles.vocabulary import CACHE, DIVERGENT, RUN_TO_RUN, UNIQUE_SAMPLES, WORKLOAD

from .config import PowerConfig

# fake bug -> (the oracles whose sweeps are built to see it, the suite files of those sweeps, what
# it is). The inverse, seeded-sampling and speculative files check the control or need engines a
# fake is not: they say nothing of the target's batch dependence.
E2E_CLASSES = {
    "padding": ((UNIQUE_SAMPLES,), ("test_single.py", "test_mixed.py", "test_logprobs.py"),
                "a batch off the capture ladder is padded to its bucket"),
    "neighbour": ((UNIQUE_SAMPLES,), ("test_needle.py", "test_mixed.py", "test_prefix.py"),
                  "a row changes beside a neighbour prompt longer than 256 tokens"),
    "replay": ((RUN_TO_RUN,), ("test_replay.py",),
               "a step shared by several requests perturbs one row 2% of the time (unseeded)"),
    "warm-cache": ((CACHE, UNIQUE_SAMPLES), ("test_cache.py", "test_prefix.py"),
                   "a prefix-cache hit resumes from half-precision states"),
    "token-budget": ((UNIQUE_SAMPLES,), ("test_single.py", "test_mixed.py"),
                     "a step holding more than 2048 tokens (all rows) takes the split-KV path"),
    "large-batch": ((UNIQUE_SAMPLES,), ("test_single.py",),
                    "a step of 48 rows or more takes another kernel (no ladder edge)"),
    "mixed-step": ((WORKLOAD,), ("test_fuzz.py",),
                   "a decoding row changes in a step where another request prefills"),
    "row-index": ((UNIQUE_SAMPLES,), ("test_single.py", "test_mixed.py"),
                  "rows past index 0 of a step reduce in another order"),
    "sampler-path": ((WORKLOAD,), ("test_fuzz.py",),
                     "another request asking for more top logprobs switches the step's sampler"),
    "stale-slot": ((UNIQUE_SAMPLES,), ("test_single.py", "test_needle.py"),
                   "a finished request's KV slot is reused without being cleared"),
    "long-context": ((UNIQUE_SAMPLES,), ("test_prefix.py",),
                     "rows with 1024 tokens of context or more split their KV by the batch size"),
}  # fmt: skip
# The clean twin runs every file any class runs, and prefill-decode: none of them may flag it.
SUITE_FILES = tuple(dict.fromkeys([f for _, files, _ in E2E_CLASSES.values() for f in files]
                                  + ["test_prefill_decode.py"]))  # fmt: skip
CLEAN = "none"
CONTROL_LADDER = (1, 4096)  # the control fake pads every batch of 2..4095 rows: it diverges at any level
SUBPROCESS_TIMEOUT_S = 600


def _suite_dir() -> Path:
    from pytest_invariance.suites import e2e

    return Path(e2e.__file__).resolve().parent


def _pytest_args(bug: str, cfg: PowerConfig, url: str, control: str, records: Path, ini: Path) -> list[str]:
    files = SUITE_FILES if bug == CLEAN else E2E_CLASSES[bug][1]
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ini),
            "--rootdir", str(ini.parent), *(str(_suite_dir() / f) for f in files),
            "--invariance-url", url, "--invariance-url-control", control, "--invariance-engine", "vllm",
            "--invariance-records", str(records), "-o", "invariance_power=off",
            "--invariance-profile", cfg.profile, "--invariance-seed", str(cfg.seed),
            "--invariance-dispatch", cfg.dispatch]  # fmt: skip
    if cfg.levels:
        args += ["--invariance-levels", ",".join(map(str, cfg.levels))]
    if cfg.replays:
        args += ["--invariance-replays", str(cfg.replays)]
    return args


def _run_suites(bug: str, cfg: PowerConfig, control_url: str, work: Path) -> tuple[list[dict], str]:
    """The shipped suites against one fake; (its records, an error line or "")."""
    from pytest_invariance.fakes import FakeEngine
    from pytest_invariance.recordio import read_records

    records = work / f"{bug}.jsonl"
    ini = work / "pytest.ini"
    with FakeEngine(bug) as fake:
        try:
            proc = subprocess.run(_pytest_args(bug, cfg, fake.url, control_url, records, ini), capture_output=True,
                                  text=True, timeout=SUBPROCESS_TIMEOUT_S, cwd=work)  # fmt: skip
        except subprocess.TimeoutExpired:
            return [], f"the e2e suites against the {bug} fake ran past {SUBPROCESS_TIMEOUT_S} s"
    if not records.is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        return [], f"the e2e suites against the {bug} fake wrote no records (exit {proc.returncode}: {tail[0]})"
    recs, _ = read_records([str(records)])
    return [r for r in recs if (r.get("extra") or {}).get("role", "target") == "target"
            and not (r.get("extra") or {}).get("inverse") and r.get("implementation") != "bundled"], ""  # fmt: skip


def miss_reason(bug: str, cfg: PowerConfig) -> str:
    """Why the suites could not see a fake's bug under this configuration, where the zoo knows."""
    from pytest_invariance.fakes import DEFAULT_LADDER

    if bug == "padding" and cfg.levels and set(cfg.levels) <= set(DEFAULT_LADDER):
        return "every level on the capture ladder"
    if bug == "replay":
        return "a 2%-per-shared-step race not seen in this run's replays (more --invariance-replays)"
    if bug == "large-batch" and cfg.levels and max(cfg.levels) < 48:
        return "no level of 48 rows or more"
    if bug == "row-index" and cfg.levels and max(cfg.levels) < 2:
        return "no level of 2 rows or more"
    return ""


def _entries(bug: str, recs: list[dict], cfg: PowerConfig, error: str) -> list[dict]:
    declared, _, what = E2E_CLASSES[bug]
    by_oracle: dict[str, list[dict]] = {}
    for r in recs:
        by_oracle.setdefault(r["oracle"], []).append(r)
    oracles = list(declared) + sorted(o for o, rs in by_oracle.items() if o not in declared
                                      and any(r["verdict"] == DIVERGENT for r in rs))  # fmt: skip
    out = []
    for oracle in oracles:
        rs = by_oracle.get(oracle, [])
        caught = any(r["verdict"] == DIVERGENT for r in rs)
        entry = {"name": bug, "layer": "e2e", "oracle": oracle, "what": what, "caught": caught, "rate": None,
                 "runs": 1, "tests": sorted({r["nodeid"].rpartition("::")[2] for r in rs})}  # fmt: skip
        if not caught:
            entry["reason"] = error or miss_reason(bug, cfg) or ("" if rs else "no shipped sweep of this oracle ran")
        out.append(entry)
    return out


def measure_e2e(cfg: PowerConfig, progress=None, workers: int = 3) -> list[dict]:
    """Every fake through the suites (``workers`` pytest processes at a time: the fakes sleep per
    step, so three overlap on two cores); the clean twin's
    verdicts stamped on every class's entries (``twin``, ``false_alarm``)."""
    from pytest_invariance.fakes import FakeEngine

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="invariance-power-") as tmp, \
            FakeEngine("padding", ladder=CONTROL_LADDER) as control:  # fmt: skip
        work = Path(tmp)
        (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        bugs = [CLEAN, *E2E_CLASSES]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = dict(zip(bugs, pool.map(lambda b: _run_suites(b, cfg, control.url, work), bugs), strict=True))
    clean_recs, clean_error = results[CLEAN]
    flagged = sorted({r["nodeid"].rpartition("::")[2] for r in clean_recs if r["verdict"] == DIVERGENT})
    twin = "incomplete" if clean_error or not clean_recs else ("divergent" if flagged else
            "invariant" if all(r["verdict"] == "invariant" for r in clean_recs) else "vacuous")  # fmt: skip
    entries = []
    for bug in E2E_CLASSES:
        recs, error = results[bug]
        for e in _entries(bug, recs, cfg, error):
            e.update(twin=twin, false_alarm=bool(flagged), seconds=round(time.perf_counter() - t0, 1))
            if flagged:
                e["false_alarm_tests"] = flagged
            entries.append(e)
            if progress is not None:
                progress(e)
    return entries


def describe_records(path: str) -> str:
    """A records file's verdict counts (for the command's ``--records`` note)."""
    counts: dict[str, int] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        v = json.loads(line).get("verdict", "?")
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
