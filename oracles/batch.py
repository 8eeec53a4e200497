"""Oracles over a callable ``f(rows) -> outputs`` (rows stacked along dim 0).

Each oracle runs ``f`` in the configurations that a batch-invariant kernel must
not distinguish and compares the probe row's output bitwise (or under the
declared contract). None of them reruns to pass: a trial either diverged or it
did not, and every trial is counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .classes import class_ranges, contract_classes, equivalence_classes
from .compare import BITWISE, BitsKey, Comparison, Contract, compare, parse_contract
from .stats import failure_summary
from .sweeps import probe_positions
from .vocabulary import BATCH_POSITION, BATCH_SIZE, CHUNKING, RUN_TO_RUN

Fn = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Point:
    """One comparison inside an oracle: where it was taken and what it found."""

    batch_size: int | None
    position: int | None
    trial: int
    comparison: Comparison
    label: str | None = None

    def to_dict(self) -> dict:
        d = {"batch_size": self.batch_size, "position": self.position, "trial": self.trial}
        if self.label is not None:
            d["label"] = self.label
        d.update(self.comparison.to_dict())
        return d


@dataclass
class OracleResult:
    """All comparisons of one oracle over all trials, plus the evidence summary."""

    oracle: str
    contract: str
    trials: int = 0
    failed_trials: set[int] = field(default_factory=set)
    points: list[Point] = field(default_factory=list)
    classes: list[list[int]] | None = None
    error: str | None = None
    nondeterministic: bool = False  # the run-to-run pre-check saw a repeat differ

    def add(self, point: Point) -> None:
        self.points.append(point)
        if not point.comparison.equal:
            self.failed_trials.add(point.trial)

    @property
    def failures(self) -> int:
        return len(self.failed_trials)

    @property
    def diverged(self) -> bool | None:
        if self.error is not None and not self.failed_trials:
            return None
        return bool(self.failed_trials)

    @property
    def first(self) -> Point | None:
        """The first differing point, in (trial, batch size, position) order."""
        bad = [p for p in self.points if not p.comparison.equal]
        if not bad:
            return None
        return min(bad, key=lambda p: (p.trial, p.batch_size or 0, p.position or 0))

    def evidence(self) -> dict:
        """JSON-able evidence for a record."""
        diffs = [p for p in self.points if not p.comparison.equal]
        first = self.first
        max_ulp = max((p.comparison.max_ulp for p in diffs), default=0.0)
        ev: dict = {
            **failure_summary(self.failures, self.trials),
            "comparisons": len(self.points),
            "differing_comparisons": len(diffs),
            "max_ulp": "inf" if max_ulp == float("inf") else max_ulp,
            "max_abs": max((p.comparison.max_abs for p in diffs), default=0.0),
            "max_frac_diff": max((p.comparison.frac_diff for p in diffs), default=0.0),
            "first": first.to_dict() if first else None,
        }
        sizes = sorted({p.batch_size for p in diffs if p.batch_size is not None})
        if sizes:
            ev["differing_batch_sizes"] = sizes
        positions = sorted({p.position for p in diffs if p.position is not None})
        if positions:
            ev["differing_positions"] = positions
        if self.nondeterministic:
            ev["nondeterministic"] = "run-to-run: the largest batch gave other bits when repeated"
        elif self.classes is not None:
            ev["equivalence_classes"] = class_ranges(self.classes)
        if self.error:
            ev["error"] = self.error
        return ev

    def describe(self) -> str:
        """One readable line: oracle, where it first differed, by how much, under which contract."""
        first = self.first
        if first is None:
            return f"{self.oracle}: no divergence in {self.trials} trial(s) [contract {self.contract}]"
        if self.nondeterministic:
            c = first.comparison
            return (f"{self.oracle}: nondeterministic (run-to-run): batch {first.batch_size} repeated gave "
                    f"{c.n_diff}/{c.numel} other elements, max ULP {c.max_ulp:g}; batch classes not meaningful "
                    f"[contract {self.contract}]")  # fmt: skip
        c = first.comparison
        where = []
        if first.batch_size is not None:
            where.append(f"batch size {first.batch_size}")
        if first.position is not None:
            where.append(f"position {first.position}")
        if first.label:
            where.append(first.label)
        where.append(f"element {list(c.first_index) if c.first_index else '?'}")
        # One definition of max ULP / max abs everywhere: over every differing comparison of every
        # trial, as the evidence (and so the summary and the matrix) reports it.
        diffs = [p.comparison for p in self.points if not p.comparison.equal]
        ulp = max((d.max_ulp for d in diffs), default=c.max_ulp)
        mabs = max((d.max_abs for d in diffs), default=c.max_abs)
        return (
            f"{self.oracle}: first difference at {', '.join(where)} (trial {first.trial}; there "
            f"{c.n_diff}/{c.numel} elements differ); over all trials max ULP {ulp:g}, max abs {mabs:.3g}; "
            f"failures {self.failures}/{self.trials} [contract {self.contract}]"
        )


def start_trial(
    oracle: str, contract: str | Contract, result: OracleResult | None
) -> tuple[Contract, OracleResult]:
    """The parsed contract, and the result a trial adds to: the caller's (later trials) or a new one."""
    c = parse_contract(contract)
    return c, result or OracleResult(oracle, str(c))


def _rows(f: Fn, batch: torch.Tensor) -> torch.Tensor:
    out = f(batch)
    if out.shape[0] != batch.shape[0]:
        raise ValueError(f"f returned {out.shape[0]} rows for a batch of {batch.shape[0]}")
    return out


def _rows_out(f: Fn, batch: torch.Tensor) -> torch.Tensor:
    """``f(batch)`` copied: kept across calls, and a kernel may reuse its output buffer."""
    return _rows(f, batch).detach().clone()


def _probe_out(f: Fn, batch: torch.Tensor, index: int) -> torch.Tensor:
    return _rows(f, batch)[index]


def batch_size_oracle(
    f: Fn,
    rows: torch.Tensor,
    batch_sizes: Sequence[int],
    *,
    contract: str | Contract = BITWISE,
    trial: int = 0,
    result: OracleResult | None = None,
) -> OracleResult:
    """Every row of a batch of N against the same rows in the next smaller batch, and row 0 alone.

    For consecutive sweep sizes M < N, ``f(rows[:N])[:M]`` is compared with ``f(rows[:M])``, so a
    kernel that spares row 0 (or any prefix of rows) is still caught, at no extra call of ``f``;
    row 0 of every batch is also compared with ``rows[0]`` alone, which gives the equivalence
    classes (batch sizes grouped by identical probe output). ``rows`` must hold at least
    ``max(batch_sizes)`` rows.
    """
    c, res = start_trial(BATCH_SIZE, contract, result)
    need = max(batch_sizes)
    if rows.shape[0] < need:
        raise ValueError(f"need {need} rows for batch size {need}, got {rows.shape[0]}")
    prev = _rows_out(f, rows[:1])
    alone = prev[0]
    want_classes = res.classes is None  # classes come from the first trial
    bitwise = c.kind == BITWISE
    probes: dict[int, object] = {1: BitsKey(alone) if bitwise else alone} if want_classes else {}
    for n in sorted(set(batch_sizes)):
        if n == 1:
            continue
        out = _rows_out(f, rows[:n])
        if want_classes:
            probes[n] = BitsKey(out[0]) if bitwise else out[0]
        res.add(Point(n, 0, trial, compare(alone, out[0], c)))
        m = prev.shape[0]
        if m > 1:  # rows 1..m-1 too (row 0 is the probe point above)
            res.add(Point(n, None, trial, compare(prev, out[:m], c), label=f"rows 0..{m - 1} vs batch {m}"))
        prev = out
    res.trials += 1
    if want_classes:
        # classes under the declared contract: bitwise groups by bits, ulp<=k / tolerance by compare
        res.classes = (equivalence_classes(probes) if bitwise
                       else contract_classes(probes, lambda a, b: compare(a, b, c).equal))  # fmt: skip
    return res


def nondeterminism_precheck(
    f: Fn, rows: torch.Tensor, n: int, *, contract: str | Contract = BITWISE, trial: int = 0,
    result: OracleResult,
) -> bool:
    """The largest batch twice: True (and a point in ``result``) when the repeat differs.

    Run before the batch-size and position oracles, so a subject whose bits change from call to
    call is reported as nondeterministic, not as a ladder of singleton batch classes."""
    c = parse_contract(contract)
    first = _rows_out(f, rows[:n])
    comp = compare(first, _rows_out(f, rows[:n]), c)
    if comp.equal:
        return False
    result.add(Point(n, None, trial, comp, label="run-to-run pre-check"))
    result.nondeterministic = True
    result.classes = None
    return True


def batch_position_oracle(
    f: Fn,
    rows: torch.Tensor,
    batch_sizes: Sequence[int],
    *,
    contract: str | Contract = BITWISE,
    trial: int = 0,
    result: OracleResult | None = None,
) -> OracleResult:
    """Probe row placed at positions {0, 1, middle, N-2, N-1} among the same neighbours.

    The reference is the probe alone (batch 1), so a position effect is never
    masked by a size effect at position 0.
    """
    c, res = start_trial(BATCH_POSITION, contract, result)
    probe, neighbours = rows[:1], rows[1:]
    alone = _probe_out(f, probe, 0)
    for n in batch_sizes:
        if n < 2:
            continue
        if neighbours.shape[0] < n - 1:
            raise ValueError(f"need {n} rows for batch size {n}, got {rows.shape[0]}")
        for pos in probe_positions(n):
            batch = torch.cat([neighbours[:pos], probe, neighbours[pos : n - 1]])
            out = _probe_out(f, batch, pos)
            res.add(Point(n, pos, trial, compare(alone, out, c)))
    res.trials += 1
    return res


def run_to_run_oracle(
    f: Fn,
    rows: torch.Tensor,
    repeats: int = 5,
    *,
    contract: str | Contract = BITWISE,
    trial: int = 0,
    result: OracleResult | None = None,
) -> OracleResult:
    """The same call repeated ``repeats`` times; every output compared with the first."""
    c, res = start_trial(RUN_TO_RUN, contract, result)
    first = f(rows).detach().clone()
    for k in range(1, repeats):
        out = f(rows)
        res.add(Point(rows.shape[0], None, trial, compare(first, out, c), label=f"repeat {k}"))
    res.trials += 1
    return res


def chunking_oracle(
    run: Callable[[int | None], torch.Tensor],
    chunk_sizes: Sequence[int],
    *,
    contract: str | Contract = BITWISE,
    trial: int = 0,
    result: OracleResult | None = None,
) -> OracleResult:
    """``run(None)`` processes the input whole, ``run(c)`` in chunks of ``c``; all must agree."""
    c, res = start_trial(CHUNKING, contract, result)
    whole = run(None)
    for size in chunk_sizes:
        res.add(Point(None, None, trial, compare(whole, run(size), c), label=f"chunk {size}"))
    res.trials += 1
    return res


def rows_chunking(f: Fn, rows: torch.Tensor) -> Callable[[int | None], torch.Tensor]:
    """Adapter: chunking along the batch dimension for row-wise callables."""

    def run(chunk: int | None) -> torch.Tensor:
        if chunk is None:
            return f(rows)
        return torch.cat([f(rows[i : i + chunk]) for i in range(0, rows.shape[0], chunk)])

    return run
