"""Batch sizes that cross every capture-ladder edge, from the target's own ladder where it reports one.

An engine that replays CUDA graphs pads a batch up to the next captured size, so a row's
arithmetic may change at each edge of the ladder and nowhere else: sizes that sit on the ladder
(1, 2, 4, 8, 16) all run unpadded, and a bug that appears only when a batch is padded is invisible
to them. A sweep over batch sizes therefore also visits each edge -1, the edge and +1, up to its
profile's limit (+1, so the top edge is crossed too). The ladder is the target's own where it
reports one (the bundled engine's ``cuda_graph_buckets``, SGLang's ``cuda_graph_bs``, vLLM's
``cudagraph_capture_sizes``; an empty one means it pads nothing), else the union of the vLLM and
SGLang default ladders, as the per-op quick profile uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_invariance.oracles.sweeps import CAPTURE_LADDERS

# Where each engine reports the batch sizes it captured (its /server_info, flattened by the adapter).
LADDER_KEYS = ("cuda_graph_buckets", "cuda_graph_bs", "cudagraph_capture_sizes")
DEFAULT_SOURCE = "vLLM and SGLang default capture ladders (the target reports none)"


@dataclass(frozen=True)
class Ladder:
    """A capture ladder and where it came from (``source`` goes into the record)."""

    sizes: tuple[int, ...]
    source: str

    def edges(self, limit: int) -> list[int]:
        return [b for b in self.sizes if b <= limit]

    def evidence(self, limit: int) -> dict[str, Any]:
        return {"source": self.source, "edges": self.edges(limit)}

    def describe(self, limit: int) -> str:
        edges = self.edges(limit)
        return (f"ladder edges {','.join(map(str, edges))} ({self.source})" if edges
                else f"no capture ladder ({self.source})")  # fmt: skip


def _sizes(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
        return tuple(sorted(set(value)))
    return None


def target_ladder(info: dict | None) -> Ladder:
    """The ladder the target reports (first of ``LADDER_KEYS`` that holds a list of sizes), else the
    default union."""
    for key in LADDER_KEYS:
        sizes = _sizes((info or {}).get(key))
        if sizes is not None:
            return Ladder(sizes, f"{key} reported by the target" if sizes else f"the target reports an empty {key}: no padding")
    union = sorted({b for ladder in CAPTURE_LADDERS.values() for b in ladder})
    return Ladder(tuple(union), DEFAULT_SOURCE)


def crossing_levels(base: list[int] | tuple[int, ...], ladder: Ladder) -> list[int]:
    """``base`` plus each ladder edge -1, the edge and +1, for edges up to ``max(base)``."""
    limit = max(base)
    sizes = set(base)
    for b in ladder.edges(limit):
        sizes.update(n for n in (b - 1, b, b + 1) if 1 <= n <= limit + 1)
    return sorted(sizes)
