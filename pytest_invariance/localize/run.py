"""``localize(model, probe, neighbours)``: the probe alone, then inside batches, op by op.

One configuration is a batch size n and a probe position p: the batch is the first n-1
neighbours with the probe inserted at p. Batch size 1 is the probe alone run again, so it checks
run-to-run determinism first: a forward that changes from call to call makes every batch culprit
meaningless and is reported as nondeterministic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pytest_invariance.oracles.sweeps import probe_positions

from .align import pair
from .culprit import Culprit, Verdict, find
from .probe import KEEP_NUMEL, Comparer, Digester, Recorder, external_storages
from .trace import MODULE, ROOT_PATH, Event, Tracer, trace

Call = Callable[[Any, torch.Tensor], Any]
POSITIONS = ("ends", "all")


@dataclass
class Config:
    """One batched run's result."""

    batch_size: int
    position: int
    verdict: Verdict
    seconds: float
    coarse: list[str] = field(default_factory=list)  # module calls compared whole (ops unpaired)


@dataclass
class Localization:
    """All configurations, the probe-alone trace's size, and the culprit table over them."""

    configs: list[Config]
    events: int  # events of the probe-alone run
    ops: int
    seconds: float
    nondeterministic: bool = False

    @property
    def culprits(self) -> list[dict]:
        """One row per distinct culprit (earliest first): where, and the configurations it explains."""
        rows: dict[tuple, dict] = {}
        for c in self.configs:
            k = c.verdict.culprit
            if k is None:
                continue
            row = rows.setdefault((k.index, k.op, k.path), {**k.to_dict(), "batch_sizes": [], "positions": []})
            if k.max_ulp is not None:
                row["max_ulp"] = max(row["max_ulp"] or 0.0, k.max_ulp)
            if c.batch_size not in row["batch_sizes"]:
                row["batch_sizes"].append(c.batch_size)
            row["positions"].append([c.batch_size, c.position])
        return [rows[k] for k in sorted(rows)]

    @property
    def culprit(self) -> dict | None:
        """The earliest culprit in execution order, or None when no configuration had one."""
        rows = self.culprits
        return rows[0] if rows else None

    @property
    def diverged(self) -> bool:
        """Whether any configuration's probe differed anywhere (a culprit, or a differing output)."""
        return any(c.verdict.culprit is not None or c.verdict.output_equal is False for c in self.configs)


def default_call(model: Any, batch: torch.Tensor) -> Any:
    return model(batch)


def _positions(n: int, positions: str | Sequence[int]) -> list[int]:
    if isinstance(positions, str):
        if positions not in POSITIONS:
            raise ValueError(f"positions={positions!r}; expected one of {', '.join(POSITIONS)} or a list")
        return probe_positions(n) if positions == "all" else sorted({0, n - 1})
    return sorted({p for p in positions if 0 <= p < n}) or [0]


def batch_of(probe: torch.Tensor, neighbours: torch.Tensor, n: int, position: int) -> torch.Tensor:
    """The first n-1 neighbours with the probe inserted at ``position`` (stacked on dim 0)."""
    if neighbours.shape[0] < n - 1:
        raise ValueError(f"batch size {n} needs {n - 1} neighbours, got {neighbours.shape[0]}")
    if tuple(neighbours.shape[1:]) != tuple(probe.shape):
        raise ValueError(f"neighbours' rows {tuple(neighbours.shape[1:])} differ from the probe's {tuple(probe.shape)}")
    nb = neighbours[: n - 1]
    return torch.cat([nb[:position], probe[None], nb[position:]])


def _final(tracer: Tracer) -> Event | None:
    done = sorted(tracer.events, key=lambda e: e.done)
    for ev in reversed(done):
        if ev.kind == MODULE and ev.path == ROOT_PATH:
            return ev
    return done[-1] if done else None


def _run(model: Any, call: Call, batch: torch.Tensor, observer: Any, before: Any = None,
         position: int = 0) -> Tracer:  # fmt: skip
    if before is not None:
        before(model, batch.shape[0], position)
    with torch.no_grad(), trace(observer, model) as tracer:
        call(model, batch)
    return tracer


def localize(
    model: Any,
    probe: torch.Tensor,
    neighbours: torch.Tensor,
    *,
    batch_sizes: Sequence[int] = (1, 8, 64),
    positions: str | Sequence[int] = "ends",
    call: Call | None = None,
    keep_numel: int = KEEP_NUMEL,
    before_run: Callable[[Any, int, int], None] | None = None,
) -> Localization:
    """Run the probe alone and in every (batch size, position); name the first op that differed.

    ``model`` is an ``nn.Module`` (its submodules give the paths) or any object ``call`` accepts;
    ``call(model, batch)`` runs the forward (default ``model(batch)``); ``probe`` is one row (e.g.
    token ids ``[T]``) and ``neighbours`` ``[K, *probe.shape]`` the rows that share its batch;
    ``before_run(model, n, position)`` is told where the probe sits before each run (a model whose
    state must follow the probe, as the bundled engine's cache blocks)."""
    call = call or default_call
    t0 = time.perf_counter()
    digester = Digester(external_storages(model))
    alone_tracer = _run(model, call, probe[None], Recorder(digester, keep_numel), before_run)
    alone = alone_tracer.events
    configs: list[Config] = []
    for n in sorted(set(batch_sizes)):
        for p in _positions(n, positions):
            t1 = time.perf_counter()
            batch = batch_of(probe, neighbours, n, p)
            comparer = Comparer(alone, n, p, digester)
            tracer = _run(model, call, batch, comparer, before_run, p)
            coarse: list[str] = []
            if comparer.misaligned is not None:
                plan, coarse = pair(alone_tracer.root, tracer.root)
                tracer = _run(model, call, batch, Comparer(alone, n, p, digester, plan), before_run, p)
            verdict = find(tracer.events, alone, _final(tracer))
            configs.append(Config(n, p, verdict, time.perf_counter() - t1, coarse))
    nondet = any(c.batch_size == 1 and (c.verdict.differing or c.verdict.output_equal is False) for c in configs)
    ops = sum(e.kind != MODULE for e in alone)
    return Localization(configs, len(alone), ops, time.perf_counter() - t0, nondet)


__all__ = ["Config", "Culprit", "Localization", "batch_of", "localize"]
