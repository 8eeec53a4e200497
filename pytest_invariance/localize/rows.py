"""Where the probe's row lies inside a batched tensor, and when that cannot be told.

A tensor of the batched run is compared with the same op's tensor of the probe-alone run:

- same shape: ``whole``. It carries no batch row (weights, rotary tables, a cache buffer, a
  reduction across the batch) and is compared whole; a difference there means it mixes rows;
- exactly one dim is ``n`` times larger: ``row``. The probe is the ``position``-th block of that
  dim. This holds when the batch is the outer factor of that dim: a leading batch dim, or batch
  and tokens flattened as ``[B*T, ...]``, which is how decoder models lay out activations;
- anything else (several dims differ, a dim not ``n`` times larger: routed MoE tokens, padding):
  ``unknown``. No probe view is taken and nothing is guessed; ops reading it say so.

A batch laid out token-major (``[T*B]``: batch inner) would be read wrongly by the block rule.
Such a misread shows up as a data-movement op (a copy, a view) whose output differs while its
inputs were equal, which copying bits cannot do; those are reported as ``layout`` events, never as
culprits (see ``culprit``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ROW, WHOLE, UNKNOWN = "row", "whole", "unknown"

# Ops that move or reinterpret bits without arithmetic: they cannot make a row batch-dependent.
DATA_MOVEMENT = frozenset(
    """view _unsafe_view reshape t transpose permute expand slice select unsqueeze squeeze cat stack
    split split_with_sizes chunk unbind clone copy copy_ contiguous alias detach index index_select
    embedding index_put index_put_ narrow as_strided flatten unflatten repeat repeat_interleave
    gather lift_fresh empty_like zeros_like ones_like new_zeros new_empty
    fill_ zero_ masked_fill masked_fill_ _reshape_alias movedim""".split()
)


@dataclass(frozen=True)
class Layout:
    """How to find the probe in one tensor: ``kind`` and, for a row, the dim and its block size."""

    kind: str
    dim: int = -1
    size: int = 0

    def describe(self) -> str:
        return f"row dim {self.dim} x{self.size}" if self.kind == ROW else self.kind


def layout(alone: tuple[int, ...], batched: tuple[int, ...], n: int) -> Layout:
    """The layout of a batched tensor of shape ``batched`` whose probe-alone twin is ``alone``."""
    if tuple(alone) == tuple(batched):
        return Layout(WHOLE)
    if len(alone) != len(batched):
        return Layout(UNKNOWN)
    diff = [d for d, (a, b) in enumerate(zip(alone, batched, strict=True)) if a != b]
    if len(diff) == 1 and batched[diff[0]] == n * alone[diff[0]]:
        return Layout(ROW, diff[0], alone[diff[0]])
    return Layout(UNKNOWN)


def probe_view(t: torch.Tensor, lay: Layout, position: int) -> torch.Tensor | None:
    """The probe's part of ``t`` (a view), the whole ``t``, or None when the layout is unknown."""
    if lay.kind == WHOLE:
        return t
    if lay.kind == ROW:
        return t.narrow(lay.dim, position * lay.size, lay.size)
    return None


def is_data_movement(op_name: str) -> bool:
    """Whether an ``aten.<name>.<overload>`` op only moves bits (see ``DATA_MOVEMENT``)."""
    parts = op_name.split(".")
    return (parts[1] if len(parts) > 1 else op_name) in DATA_MOVEMENT
