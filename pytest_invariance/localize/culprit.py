"""The first op that made the probe row differ, and how far the difference spread after it.

Rule: walk the batched run's compared events in completion order; the culprit is the first whose
probe-row output differs while every input it read was equal. Honest exceptions, each reported
rather than guessed around:

- an output without a batch row (``whole``: a reduction across the batch, a shared cache) that
  differs *mixes rows*. The first such event is named; an op whose row output then differs with
  a differing whole input is the culprit ``via`` that mixing;
- an input whose layout is unknown cannot be shown equal: the culprit is then ``unverified`` (it
  is at this op or at an op upstream that produced that input);
- a data-movement op (copy, view, cat...) cannot round differently; a difference there with equal
  inputs means the probe's row was misread (``layout``), and it is never named as the culprit;
- a module call compared whole (its ops could not be paired, see ``align``) can be the culprit at
  module granularity only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .probe import Seen
from .rows import ROW, WHOLE, is_data_movement
from .trace import MODULE, Event

_LAYER = re.compile(r"^(.*?\blayers\.\d+)\b")


@dataclass
class Culprit:
    """Where the probe row first differed in one configuration."""

    index: int  # the event's start index in the probe-alone run (stable across configurations)
    kind: str  # op | module
    op: str
    path: str
    in_shapes: list[tuple[int, ...]]
    out_shapes: list[tuple[int, ...]]
    dtype: str
    max_ulp: float | None  # None: seen by digest only (``keep_numel`` 0 or a large output)
    n_diff: int
    numel: int
    via: str | None = None  # the first event whose batch-wide (whole) output differed, when read here
    unverified: int = 0  # inputs whose probe row could not be located

    def to_dict(self) -> dict:
        return {
            "index": self.index, "kind": self.kind, "op": self.op, "module": self.path,
            "in_shapes": [list(s) for s in self.in_shapes], "out_shapes": [list(s) for s in self.out_shapes],
            "dtype": self.dtype, "max_ulp": self.max_ulp, "n_diff": self.n_diff, "numel": self.numel,
            "via": self.via, "unverified_inputs": self.unverified,
        }  # fmt: skip


@dataclass
class Verdict:
    """Everything one configuration found."""

    culprit: Culprit | None
    output_equal: bool | None
    compared: int
    differing: int
    mixing: str | None = None  # first event whose batch-wide output differed
    layout_events: list[str] = field(default_factory=list)
    unknown_layouts: int = 0
    drift: list[dict] = field(default_factory=list)
    upstream_differing: int = 0  # events that differed and completed before the culprit (mixing, layout)


def layer_of(path: str) -> str:
    """``model.layers.3`` for anything inside that layer; the path itself otherwise."""
    m = _LAYER.match(path)
    return m.group(1) if m else path


def _label(ev: Event) -> str:
    return f"{ev.name} at {ev.path}"


def _differs_in_row(seen: Seen) -> bool:
    return any(e is False and lay.kind == ROW for e, lay in zip(seen.out_equal, seen.out_layouts, strict=False))


def _differs_whole(seen: Seen) -> bool:
    return any(e is False and lay.kind == WHOLE for e, lay in zip(seen.out_equal, seen.out_layouts, strict=False))


def find(events: list[Event], alone: list[Event], final: Event | None) -> Verdict:
    """The culprit and the drift of one batched run (``events`` carry ``Seen`` data)."""
    seen = sorted((e for e in events if isinstance(e.data, Seen)), key=lambda e: e.done)
    mixing: str | None = None
    culprit: Culprit | None = None
    layout_events: list[str] = []
    differing = upstream = 0
    unknown = sum(lay.kind not in (ROW, WHOLE) for e in seen for lay in e.data.out_layouts)
    for ev in seen:
        s: Seen = ev.data
        row_diff, whole_diff = _differs_in_row(s), _differs_whole(s)
        differing += row_diff or whole_diff
        if culprit is not None or not (row_diff or whole_diff):
            continue
        upstream += 1
        rows_equal = all(eq is not False for eq, lay in zip(s.in_equal, s.in_layouts, strict=True) if lay.kind == ROW)
        wholes_equal = all(eq is not False for eq, lay in zip(s.in_equal, s.in_layouts, strict=True) if lay.kind == WHOLE)
        if not rows_equal:
            continue
        if whole_diff and mixing is None and wholes_equal:
            mixing = _label(ev)
        if not row_diff:
            continue
        if ev.kind != MODULE and is_data_movement(ev.name) and wholes_equal:
            layout_events.append(_label(ev))
            continue
        twin = alone[s.twin]
        culprit = Culprit(
            index=s.twin, kind=ev.kind, op=ev.name, path=ev.path, in_shapes=twin.in_shapes,
            out_shapes=twin.out_shapes, dtype=",".join(sorted(set(ev.out_dtypes))),
            max_ulp=None if s.digest_only and not s.max_ulp else s.max_ulp,
            n_diff=s.n_diff, numel=s.numel, via=None if wholes_equal else mixing or "a batch-wide input",
            unverified=sum(eq is None for eq in s.in_equal),
        )  # fmt: skip
        upstream -= 1
    out_equal = None
    if final is not None and isinstance(final.data, Seen):
        eqs = final.data.out_equal
        out_equal = None if any(e is None for e in eqs) else all(eqs)
    return Verdict(culprit, out_equal, len(seen), differing, mixing, layout_events, unknown, drift(seen), upstream)


def drift(seen: list[Event]) -> list[dict]:
    """Per layer (in execution order): events compared, events whose probe row differed, max ULP."""
    table: dict[str, dict] = {}
    for ev in seen:
        s: Seen = ev.data
        row = table.setdefault(layer_of(ev.path), {"layer": layer_of(ev.path), "compared": 0, "differing": 0, "max_ulp": 0.0})
        row["compared"] += 1
        if _differs_in_row(s) or _differs_whole(s):
            row["differing"] += 1
            row["max_ulp"] = max(row["max_ulp"], s.max_ulp)
    return list(table.values())
