"""The op census: every distinct (aten op, shapes without the batch dim, dtype) a forward calls,
each run through the batch-size and batch-position oracles at those shapes on synthetic rows.

So the matrix shows, for this model on this hardware, which ops are variant. Matmul, RMSNorm,
log-softmax and mean ops get the catalogue's mutant as their positive control at the same
shapes; other ops have none here, so their equality is ``vacuous``, as the verdict rule says.
Under ``reference_kernels.enable()`` each op is marked routed or not: what the mode switch does
not cover (attention through SDPA, softmax, elementwise ops) is named, not hidden.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from pytest_invariance.oracles import batch as B
from pytest_invariance.oracles.inputs import wide_spread
from pytest_invariance.oracles.sweeps import batch_sweep
from pytest_invariance.oracles.verdict import decide
from pytest_invariance.oracles.vocabulary import BATCH_POSITION, BATCH_SIZE

from .align import pair
from .census_ops import OpSpec, family_of, packet, spec_of
from .trace import OP, trace

CENSUS_ORACLES = (BATCH_SIZE, BATCH_POSITION)


class _Nop:
    def before(self, ev: Any, inputs: Any) -> None:
        return None

    def after(self, ev: Any, state: Any, outputs: Any) -> None:
        return None


@dataclass
class OpResult:
    spec: OpSpec
    routed: bool | None  # None: the mode switch was off
    verdicts: dict[str, str] = field(default_factory=dict)
    evidence: dict[str, dict] = field(default_factory=dict)
    control: dict[str, dict | None] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def family(self) -> str:
        return family_of(self.spec.name)


@dataclass
class Census:
    ops: list[OpResult]
    enabled: bool
    sizes: list[int]
    coarse: list[str] = field(default_factory=list)  # module calls whose op sequence changes with the batch

    def table(self) -> str:
        """Markdown: every distinct op but pure data movement (counted below the table)."""
        lines = ["| op | family | row shapes | dtype | routed | batch-size | batch-position | where / why not run |",
                 "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        moved = 0
        for r in self.ops:
            s = r.spec
            if s.skip and s.skip.startswith("data movement"):
                moved += 1
                continue
            shapes = " ".join("x".join(map(str, sh)) for sh in s.row_shapes) or "-"
            routed = "-" if r.routed is None else "yes" if r.routed else "NO"
            note = s.skip or f"{s.paths[0]}{f' (+{len(s.paths) - 1})' if len(s.paths) > 1 else ''}"
            lines.append(f"| {s.name} | {r.family} | {shapes} | {s.dtype or '-'} | {routed} | "
                         f"{r.verdicts.get(BATCH_SIZE, '-')} | {r.verdicts.get(BATCH_POSITION, '-')} | {note} |")  # fmt: skip
        for c in self.coarse:
            lines.append(f"| (module call) | - | - | - | - | not run | not run | {c}: op sequence changes with the batch |")
        lines.append(f"{moved} distinct data-movement ops not run (they copy bits and cannot round)")
        return "\n".join(lines)


def _mutant(spec: OpSpec) -> Callable | None:
    """The catalogue mutant with the aten op's own signature, where the shapes allow one."""
    from pytest_invariance.reference_kernels.mutants.rmsnorm_split import split_rmsnorm
    from pytest_invariance.reference_kernels.mutants.rowsplit import split_log_softmax, split_mean
    from pytest_invariance.reference_kernels.mutants.splitk_matmul import splitk_matmul

    p, shapes = packet(spec.name), spec.in_shapes
    if "scaled_dot_product" in p:
        return _sdpa_mutant(spec.func)
    if p == "mm" and spec.in_layouts[0].dim == 0 and spec.in_layouts[1].kind == "whole":
        return lambda a, b: splitk_matmul(a, b.t())
    if p == "addmm" and len(shapes) == 3 and spec.in_layouts[1].dim == 0 and spec.in_layouts[2].kind == "whole":
        return lambda bias, a, b, beta=1, alpha=1: splitk_matmul(a, b.t()) + bias
    if p == "rms_norm":
        return lambda x, shape, w=None, eps=None: split_rmsnorm(x.reshape(-1, x.shape[-1]), w, eps).reshape(x.shape)
    if p == "_log_softmax":
        return lambda x, dim, half: split_log_softmax(x.reshape(-1, x.shape[-1])).reshape(x.shape) if dim in (-1, x.dim() - 1) else None
    if spec.name == "aten.mean.dim":
        def mean(x: torch.Tensor, dim: Any, keepdim: bool = False, dtype: Any = None) -> torch.Tensor:
            if list(dim) not in ([-1], [x.dim() - 1]):
                raise ValueError("mean-split control covers the last dim only")
            y = split_mean(x.reshape(-1, x.shape[-1])).reshape(x.shape[:-1])
            return y.unsqueeze(-1) if keepdim else y

        return mean
    return None


def _sdpa_mutant(func: Any) -> Callable:
    """Split-KV attention (``mutants.splitkv_prefill``: split count from sequences x KV heads, at least 4
    keys a split) with the signature of any SDPA op: its arguments are bound by the op's schema names."""
    from pytest_invariance.reference_kernels.mutants.splitkv_decode import splitkv_prefill

    names = [a.name for a in func._schema.arguments]

    def mutant(*args: Any, **kwargs: Any) -> torch.Tensor:
        a = {**dict(zip(names, args, strict=False)), **kwargs}
        q, k, v = a["query"], a["key"], a["value"]
        b, hq, lq, d = q.shape
        lk = k.shape[2]
        if a.get("attn_mask") is not None or a.get("attn_bias") is not None or (a.get("is_causal") and lq != lk):
            raise ValueError("the split-KV control covers unmasked SDPA (causal with Lq == Lk, or dense) only")
        cu = torch.arange(b + 1, device=q.device, dtype=torch.int32)
        out = splitkv_prefill(q.transpose(1, 2).reshape(b * lq, hq, d), k.transpose(1, 2).reshape(b * lk, -1, d),
                              v.transpose(1, 2).reshape(b * lk, -1, d), cu * lq, cu * lk,
                              causal=bool(a.get("is_causal")), scale=a.get("scale"), min_keys=4)  # fmt: skip
        return out.reshape(b, lq, hq, d).transpose(1, 2)

    return mutant


def _routed(spec: OpSpec) -> bool:
    from pytest_invariance.reference_kernels.mode import ROUTED_OPS

    parts = spec.name.split(".")
    overload = parts[2] if len(parts) > 2 else "default"
    return packet(spec.name) in ROUTED_OPS if overload == "default" else f"{packet(spec.name)}.{overload}" in ROUTED_OPS


def _oracles(f: Callable, pool: torch.Tensor, sizes: list[int]) -> dict[str, B.OracleResult]:
    out: dict[str, B.OracleResult] = {}
    for oracle in CENSUS_ORACLES:
        res = B.OracleResult(oracle, "bitwise")
        try:
            if not B.nondeterminism_precheck(f, pool, max(sizes), trial=0, result=res):
                if oracle == BATCH_SIZE:
                    B.batch_size_oracle(f, pool, sizes, trial=0, result=res)
                else:
                    B.batch_position_oracle(f, pool, _position_sizes(sizes), trial=0, result=res)
        except Exception as exc:  # noqa: BLE001 - an op that raises at these shapes is incomplete, not hidden
            res.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        out[oracle] = res
    return out


def _position_sizes(sizes: list[int]) -> list[int]:
    big = sorted(s for s in sizes if s >= 3)
    return sorted({big[0], big[len(big) // 2], big[-1]}) if big else [2]


def specs(model: Any, batch: torch.Tensor, call: Callable, n0: int = 3,
          before_run: Callable | None = None) -> tuple[list[OpSpec], list[str]]:  # fmt: skip
    """Distinct ops of ``call(model, batch[:n0])`` against ``batch[:1]``, in first-call order, and
    the module calls whose ops could not be paired (``align``)."""
    for n, into in ((1, "alone"), (n0, "batched")):
        if before_run is not None:
            before_run(model, n, 0)
        with torch.no_grad(), trace(_Nop(), model, keep_calls=True) as tracer:
            call(model, batch[:n])
        if into == "alone":
            alone = tracer
        else:
            batched = tracer
    if [e.signature for e in alone.events] == [e.signature for e in batched.events]:
        plan, coarse = {e.index: alone.events[e.index] for e in batched.events}, []
    else:
        plan, coarse = pair(alone.root, batched.root)
    out: dict[tuple, OpSpec] = {}
    for ev in batched.events:
        twin = plan.get(ev.index)
        if ev.kind != OP or twin is None or twin.call is None:
            continue
        s = spec_of(twin, ev, n0)
        if s.key in out:
            if s.paths[0] not in out[s.key].paths:
                out[s.key].paths.append(s.paths[0])
        else:
            out[s.key] = s
    return list(out.values()), coarse


def census(
    model: Any,
    batch: torch.Tensor,
    *,
    call: Callable | None = None,
    profile: str = "quick",
    limit: int | None = None,
    seed: int = 0,
    before_run: Callable | None = None,
) -> Census:
    """Run the per-op oracles on every distinct op of the forward over ``batch`` (rows on dim 0)."""
    from pytest_invariance.reference_kernels import is_enabled

    from .run import default_call

    enabled = is_enabled()
    sizes = batch_sweep(profile, limit)
    results = []
    found, coarse = specs(model, batch, call or default_call, before_run=before_run)
    for spec in found:
        r = OpResult(spec, _routed(spec) if enabled else None)
        if spec.skip is None:
            t0 = time.perf_counter()
            dev = batch.device
            pool = wide_spread((max(sizes), spec.row_numel), seed, getattr(torch, spec.dtype), device=dev)
            subject = _oracles(spec.fn(seed, dev), pool, sizes)
            mutant = _mutant(spec)
            control = _oracles(spec.fn(seed, dev, mutant), pool, sizes) if mutant is not None else {}
            for oracle, res in subject.items():
                ctl = control.get(oracle)
                r.verdicts[oracle] = decide(res.diverged, None if ctl is None or ctl.error else ctl.diverged,
                                            error=res.error is not None or (ctl is not None and ctl.error is not None))  # fmt: skip
                r.evidence[oracle] = res.evidence()
                r.control[oracle] = None if ctl is None else {"name": f"mutant at {spec.name}", "diverged": ctl.diverged,
                                                              "evidence": ctl.evidence()}  # fmt: skip
            r.seconds = time.perf_counter() - t0
        results.append(r)
    return Census(results, enabled, sizes, coarse)


def census_records(result: Census, *, run_id: str, model: str) -> list[dict]:
    """One record per (replayed op, oracle): family the op's where one maps, else the aten name."""
    from pytest_invariance import hardware
    from pytest_invariance.oracles.vocabulary import quantization_of
    from pytest_invariance.records import make_record

    out = []
    for r in result.ops:
        s = r.spec
        impl = "reference" if r.routed else "torch"
        for oracle, verdict in r.verdicts.items():
            out.append(make_record(
                run_id=run_id, fingerprint=hardware.fingerprint(), family=r.family, implementation=impl,
                oracle=oracle, verdict=verdict, nodeid=f"cli::census::{model}::{s.name}", dtype=s.dtype,
                quantization=quantization_of(s.dtype), mode="invariant" if result.enabled else "default",
                shape={"op": s.name, "rows": [list(x) for x in s.row_shapes]}, evidence=r.evidence[oracle],
                control=r.control[oracle], trials=1, profile="quick",
                extra={"model": model, "op": s.name, "paths": s.paths[:8], "routed": r.routed,
                       "batch_sizes": result.sizes, "seconds": round(r.seconds, 3)},
            ))  # fmt: skip
    return out
