"""One configuration (batch size n, probe at position p) compared with the probe alone, op by op.

The probe-alone run (:class:`Recorder`) keeps, per event, the digests of its inputs and outputs
and a copy of each output up to ``keep_numel`` elements (the probe's own activations; large
weights views are kept as digests only). The batched run (:class:`Comparer`) takes the probe's
view of every tensor (``rows``), compares outputs bitwise with ULP distance where the copy was
kept and by digest otherwise, and keeps only those comparisons. Memory is one probe-alone trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from pytest_invariance.oracles.compare import compare

from .digest import content_digest, identity_digest
from .rows import WHOLE, Layout, layout, probe_view
from .trace import Event

KEEP_NUMEL = 1 << 22
# Factories of uninitialized memory: their bits are whatever the allocator left, so never compared.
UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"})


def _version(t: torch.Tensor) -> int | None:
    try:
        return int(t._version)
    except RuntimeError:  # inference tensors keep no version counter: never cached
        return None


class Digester:
    """Digests of probe views, cached per tensor and version; parameters' aliases by identity."""

    def __init__(self, external: set[int]) -> None:
        self.external = external
        self._cache: Any = WeakIdKeyDictionary()

    def __call__(self, t: torch.Tensor, lay: Layout, position: int) -> torch.Tensor | None:
        view = probe_view(t, lay, position)
        if view is None:
            return None
        ver = _version(t)
        key = (ver, lay, position)
        hit = self._cache.get(t) if ver is not None else None
        if hit is not None and hit[0] == key:
            return hit[1]
        if lay.kind == WHOLE and t.untyped_storage().data_ptr() in self.external:
            d = identity_digest(t)
        else:
            d = content_digest(view)
        if ver is not None:
            self._cache[t] = (key, d)
        return d


def external_storages(model: Any) -> set[int]:
    """Storages of a module's parameters and buffers: read-only during inference."""
    if not isinstance(model, torch.nn.Module):
        return set()
    out = {p.untyped_storage().data_ptr() for p in model.parameters()}
    out |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    return out


@dataclass
class Alone:
    """What the probe-alone run keeps of one event."""

    in_digests: list[torch.Tensor]
    out_digests: list[torch.Tensor] = field(default_factory=list)
    out_copies: list[torch.Tensor | None] = field(default_factory=list)


class Recorder:
    """Observer of the probe-alone run."""

    def __init__(self, digester: Digester, keep_numel: int = KEEP_NUMEL) -> None:
        self.digest = digester
        self.keep_numel = keep_numel

    def before(self, ev: Event, inputs: list[torch.Tensor]) -> Alone:
        return Alone([self.digest(t, Layout(WHOLE), 0) for t in inputs])

    def after(self, ev: Event, state: Alone, outputs: list[torch.Tensor]) -> None:
        state.out_digests = [self.digest(t, Layout(WHOLE), 0) for t in outputs]
        state.out_copies = [t.detach().clone() if t.numel() <= self.keep_numel else None for t in outputs]
        ev.data = state


@dataclass
class Seen:
    """One batched event against its probe-alone twin (``twin``: the twin's index)."""

    twin: int
    in_layouts: list[Layout]
    in_equal: list[bool | None]
    out_layouts: list[Layout] = field(default_factory=list)
    out_equal: list[bool | None] = field(default_factory=list)
    max_ulp: float = 0.0
    n_diff: int = 0
    numel: int = 0
    digest_only: bool = False  # a difference seen by digest only (no copy kept): no ULP distance


class Comparer:
    """Observer of a batched run: compares each paired event with its twin, keeps the comparisons.

    ``plan`` maps event index -> twin; None pairs by index and stops at the first event whose
    name, path or input count differ (``misaligned``: then ``align.pair`` makes a plan)."""

    def __init__(self, alone: list[Event], n: int, position: int, digester: Digester,
                 plan: dict[int, Event] | None = None) -> None:  # fmt: skip
        self.alone, self.n, self.position, self.digest = alone, n, position, digester
        self.plan = plan
        self.misaligned: int | None = None
        # storage -> version of uninitialized memory not yet written: reading it compares garbage
        self._unwritten: dict[int, int] = {}

    def _reads_unwritten(self, inputs: list[torch.Tensor]) -> bool:
        for t in inputs:
            ver = self._unwritten.get(t.untyped_storage().data_ptr())
            if ver is not None and ver == _version(t):
                return True
        return False

    def _twin(self, ev: Event, inputs: list[torch.Tensor]) -> Event | None:
        if self.plan is not None:
            return self.plan.get(ev.index)
        if self.misaligned is not None:
            return None
        twin = self.alone[ev.index] if ev.index < len(self.alone) else None
        if twin is None or twin.signature != ev.signature or len(twin.in_shapes) != len(inputs):
            self.misaligned = ev.index
            return None
        return twin

    def before(self, ev: Event, inputs: list[torch.Tensor]) -> tuple[Event, Seen] | None:
        twin = self._twin(ev, inputs)
        if twin is None or len(twin.in_shapes) != len(inputs) or self._reads_unwritten(inputs):
            return None
        if _uninitialized(ev.name):
            return twin, None  # type: ignore[return-value]
        lays = [layout(s, tuple(t.shape), self.n) for s, t in zip(twin.in_shapes, inputs, strict=True)]
        equal: list[bool | None] = []
        for t, lay, ref in zip(inputs, lays, twin.data.in_digests, strict=True):
            d = self.digest(t, lay, self.position)
            equal.append(None if d is None or ref is None else bool(torch.equal(d, ref)))
        return twin, Seen(twin.index, lays, equal)

    def after(self, ev: Event, state: tuple[Event, Seen] | None, outputs: list[torch.Tensor]) -> None:
        if state is None:
            return
        twin, seen = state
        if seen is None:  # uninitialized memory: remember it until something writes it
            for t in outputs:
                ver = _version(t)
                if ver is not None:
                    self._unwritten[t.untyped_storage().data_ptr()] = ver
            return
        if len(twin.out_shapes) != len(outputs):
            return
        ref: Any = twin.data
        for i, t in enumerate(outputs):
            lay = layout(twin.out_shapes[i], tuple(t.shape), self.n)
            seen.out_layouts.append(lay)
            view = probe_view(t, lay, self.position)
            copy = ref.out_copies[i]
            if view is None:
                seen.out_equal.append(None)
            elif copy is not None and copy.dtype != view.dtype:
                seen.out_equal.append(False)
            elif copy is not None:
                c = compare(copy, view.detach())
                seen.out_equal.append(c.equal)
                if not c.equal:
                    seen.max_ulp = max(seen.max_ulp, c.max_ulp)
                    seen.n_diff += c.n_diff
                    seen.numel += c.numel
            else:
                d = self.digest(t, lay, self.position)
                eq = None if d is None else bool(torch.equal(d, ref.out_digests[i]))
                seen.out_equal.append(eq)
                seen.digest_only |= eq is False
        ev.data = seen


def _uninitialized(name: str) -> bool:
    parts = name.split(".")
    return len(parts) > 1 and parts[0] == "aten" and parts[1] in UNINITIALIZED
