"""Run the per-op zoo through the public ``invariance`` fixture with the user's configuration.

Each (class, oracle) is one fixture check: the clean twin is the subject and the planted bug is
its positive control, so one check answers both questions (was the bug seen? was the twin left
alone?) exactly as the user's own checks would be judged: same profile, sizes, limit, trials,
seed and repeats, the same oracles, the same judge. A probabilistic class is run again with
fresh seeds (``PowerConfig.runs`` runs in all), and its detection rate is the fraction of runs
that saw it.
"""

from __future__ import annotations

import time

from pytest_invariance.oracles.vocabulary import BATCH_POSITION, BATCH_SIZE, DIVERGENT, RUN_TO_RUN

from .config import CAUGHT_AT, OP_ORACLES, PowerConfig
from .zoo import OP_CLASSES, OpClass, rows_for

RUN_SEED_STRIDE = 10_007  # run r of a probabilistic class draws its inputs from seed + r * stride


def _settings(cfg: PowerConfig, run: int):
    from pytest_invariance.settings import Settings

    return Settings(run_id=f"power-{cfg.digest('ops')}", profile=cfg.profile, trials=cfg.trials,
                    seed=cfg.seed + run * RUN_SEED_STRIDE, repeats=cfg.repeats, limit=cfg.limit)  # fmt: skip


def _check(cls: OpClass, oracle: str, cfg: PowerConfig, run: int, with_twin: bool) -> dict:
    """One fixture check: the twin (or, on repeated runs, the planted bug alone) as the subject."""
    from pytest_invariance.fixture import Invariance

    inv = Invariance(_settings(cfg, run), f"pytest_invariance/power::{cls.name}[{oracle}]")
    method = {BATCH_SIZE: inv.batch, BATCH_POSITION: inv.position, RUN_TO_RUN: inv.run_to_run}[oracle]
    planted = cls.build(True, run)
    planted.__name__ = f"planted:{cls.name}"
    inputs = rows_for(max(inv.batch_sizes()))
    if not with_twin:
        rec = method(planted, inputs, implementation=f"planted:{cls.name}", expect="measure")
        return {"caught": rec["verdict"] == DIVERGENT, "record": rec}
    twin = cls.build(False, run)
    rec = method(twin, inputs, implementation=f"zoo:{cls.name}", mode="clean-twin", control=planted,
                 control_name=f"planted:{cls.name}", expect="measure")  # fmt: skip
    return {"caught": bool((rec.get("control") or {}).get("diverged")), "twin": rec["verdict"], "record": rec}


def miss_reason(cls: OpClass, cfg: PowerConfig, rate: float | None, oracle: str = BATCH_SIZE) -> str:
    """Why a class was missed, in the words of the summary: ``size not swept: needs N=6``,
    ``detection 0.80 at 3 trials``; empty where the zoo has no better word than "missed"."""
    from pytest_invariance.oracles.sweeps import batch_sweep

    from pytest_invariance.fixture import POSITION_SIZES, position_sizes

    sizes = batch_sweep(cfg.profile, cfg.limit)
    if cls.fires_at is not None and not any(cls.fires_at(n) for n in sizes):
        return f"size not swept: needs {cls.needs}"
    if oracle == BATCH_POSITION and cls.fires_at is not None and not any(map(cls.fires_at, position_sizes(sizes))):
        return f"size not among the position oracle's {POSITION_SIZES} sizes: needs {cls.needs}"
    if rate is not None:
        return f"detection {rate:.2f} at {cfg.trials} trial{'s' if cfg.trials != 1 else ''}"
    return ""


def measure_class(cls: OpClass, oracle: str, cfg: PowerConfig, records: list[dict] | None = None) -> dict:
    """The entry of one (class, oracle): caught, the twin's verdict, the rate where measured."""
    t0 = time.perf_counter()
    first = _check(cls, oracle, cfg, 0, with_twin=True)
    results = [first]
    if cls.probabilistic:
        results += [_check(cls, oracle, cfg, r, with_twin=False) for r in range(1, cfg.runs)]
    if records is not None:
        records += [r["record"] for r in results]
    seen = sum(r["caught"] for r in results)
    rate = seen / len(results) if cls.probabilistic else None
    caught = (rate >= CAUGHT_AT) if rate is not None else bool(first["caught"])
    entry = {"name": cls.name, "layer": "op", "oracle": oracle, "what": cls.what, "caught": caught,
             "twin": first["twin"], "false_alarm": first["twin"] == DIVERGENT, "rate": rate,
             "runs": len(results), "seconds": round(time.perf_counter() - t0, 3)}  # fmt: skip
    if not caught:
        entry["reason"] = miss_reason(cls, cfg, rate, oracle)
    return entry


def measure_ops(cfg: PowerConfig, records: list[dict] | None = None, progress=None) -> list[dict]:
    """Every (class, oracle) the zoo has, for every per-op oracle (the summary keeps the
    configured ones); ``blind`` entries for the oracles a class is out of reach of by design."""
    entries = []
    for cls in OP_CLASSES:
        for oracle in OP_ORACLES:
            if oracle not in cls.oracles:
                entries.append({"name": cls.name, "layer": "op", "oracle": oracle, "what": cls.what,
                                "blind": cls.blind.get(oracle, "not this oracle's question")})  # fmt: skip
                continue
            entries.append(measure_class(cls, oracle, cfg, records))
            if progress is not None:
                progress(entries[-1])
    return entries
