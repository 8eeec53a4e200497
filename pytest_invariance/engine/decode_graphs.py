"""Decode steps replayed from CUDA graphs: one graph per (batch bucket, block-table width).

Why: an eager decode step of the Llama-3-8B shape launches several hundred kernels from Python,
and the host, not the GPU, sets the step time. A captured graph replays them with no host work.

What it changes, and why that is a mechanism the sweeps must see: a decode batch of n rows is
padded to the next bucket of the capture ladder (1, 2, 4, 8, 16, 24, ...), so every GEMM runs at
the bucket's M, not n, and default mode fixes its split-KV count per graph from the bucket and the
table width (a graph cannot read lengths on the host). Batch sizes that share a bucket share
kernels; the bucket edges are where a row's bits may move. In invariant mode the reference
kernels give a row the same bits at any M and any table width, so padding cannot change a row
(``tests/engine/test_decode_graphs.py``; on the GPU the e2e suites run with graphs on).

Static buffers: the inputs live in fixed device tensors that each replay reads; padding rows
write their K/V to the runner's spare block and attend to that one slot. A step is replayed
only when every item is a plain decode (one sampled token, no drafts, no prompt logprobs) and
every id has a materialized embedding row; anything else runs eager.

On CPU (``cuda_graphs="on"``, for tests) the same static-buffer forward runs without a capture:
the padding, the buffers and the bucket choice are exercised, the capture itself is not.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .kernels import AttnBatch, Kernels
from .model import Model

MIN_WIDTH = 8  # blocks: the narrowest table a graph is captured for (128 tokens at block size 16)


@dataclass
class DecodeGraphStats:
    """What the graphs did (reported by ``/server_info`` and the benchmark)."""

    captured: int = 0
    replays: int = 0
    eager_decode_steps: int = 0  # decode-only steps that could not replay (too large, reserved ids)
    capture_errors: list[str] = field(default_factory=list)  # shapes CUDA refused to capture (run eager)

    def as_dict(self) -> dict:
        return {"captured": self.captured, "replays": self.replays, "eager_decode_steps": self.eager_decode_steps,
                "capture_errors": list(self.capture_errors)}  # fmt: skip


def width_class(blocks: int, max_blocks: int) -> int:
    """Table width (blocks) of the graph that serves a step whose longest table has ``blocks``:
    the next power of two from ``MIN_WIDTH``, capped at ``max_blocks``."""
    w = MIN_WIDTH
    while w < blocks:
        w *= 2
    return min(w, max_blocks)


class DecodeGraphs:
    """Captured decode forwards of one engine, made on first use of each (bucket, width)."""

    def __init__(self, model: Model, kernels: Kernels, kv: list, ladder: Sequence[int], block_size: int,
                 scratch_block: int, capture: bool) -> None:  # fmt: skip
        self.model, self.kern, self.kv = model, kernels, kv
        self.ladder = tuple(ladder)
        self.block_size = block_size
        self.scratch_block = scratch_block
        self.capture = capture
        self.max_blocks = -(-model.cfg.max_position // block_size)
        dev = model.device
        b = self.ladder[-1]
        self.ids = torch.zeros(b, dtype=torch.long, device=dev)
        self.pos = torch.zeros(b, dtype=torch.long, device=dev)
        self.slots = torch.zeros(b, dtype=torch.long, device=dev)
        self.table = torch.zeros((b, self.max_blocks), dtype=torch.long, device=dev)
        self.ctx = torch.zeros(b, dtype=torch.long, device=dev)
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph | None, torch.Tensor | None]] = {}
        self._pool = None
        self.stats = DecodeGraphStats()

    def bucket(self, n: int) -> int | None:
        """The ladder's size for a decode batch of ``n`` rows (None: above the ladder, run eager)."""
        return next((b for b in self.ladder if b >= n), None)

    def run(self, ids: list[int], pos: list[int], slots: list[int], tables: list[list[int]],
            ctx: list[int]) -> torch.Tensor | None:  # fmt: skip
        """fp32 logits [n, V] of a decode-only step, or None where it must run eager."""
        n = len(ids)
        b = self.bucket(n)
        if b is None or max(ids) >= self.model.embed_rows:
            self.stats.eager_decode_steps += 1
            return None
        w = width_class(max(len(t) for t in tables), self.max_blocks)
        key = (b, w)
        if key not in self._graphs:
            self._graphs[key] = self._make(b, w)
        self._fill(b, w, ids, pos, slots, tables, ctx)
        graph, out = self._graphs[key]
        if graph is None:  # no capture (CPU, or one CUDA refused): the same forward over the same buffers
            out = self._forward(b, w)
            if self.capture:
                self.stats.eager_decode_steps += 1
            else:
                self.stats.replays += 1  # the CPU's static-buffer replay
        else:
            graph.replay()
            self.stats.replays += 1
        return out[:n]

    def info(self) -> dict:
        return {"ladder": list(self.ladder), "captured_shapes": sorted(self._graphs), **self.stats.as_dict()}

    # --- inside ----------------------------------------------------------------------------------

    def _meta(self, b: int, w: int) -> AttnBatch:
        rows = list(range(b))
        return AttnBatch(
            q_starts=rows, q_lens=[1] * b, ctx_lens=[w * self.block_size] * b, block_tables=[[]] * b,
            slot_mapping=self.slots[:b], decode_idx=rows, block_table_tensor=self.table[:b, :w],
            decode_ctx=self.ctx[:b], all_decode=True,
            decode_splits=self.kern.graph_splits(b, w * self.block_size),
        )  # fmt: skip

    def _forward(self, b: int, w: int) -> torch.Tensor:
        hidden = self.model.forward(self.kern, self.ids[:b], self.pos[:b], self._meta(b, w), self.kv, max_id=0)
        return self.model.logits(self.kern, hidden)

    def _pad(self) -> None:
        """Every buffer row as a padding row: id 0 at position 0, written to and reading the spare block."""
        self.ids.zero_()
        self.pos.zero_()
        self.slots.fill_(self.scratch_block * self.block_size)
        self.table.fill_(self.scratch_block)
        self.ctx.fill_(1)

    def _make(self, b: int, w: int) -> tuple[torch.cuda.CUDAGraph | None, torch.Tensor | None]:
        """Capture the forward of (b, w): warmed up on a side stream first (kernels compiled, workspaces
        allocated), over padding rows only, so neither run writes into a live sequence's cache."""
        if not self.capture:
            return None, None
        self._pad()
        side = torch.cuda.Stream(self.model.device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._forward(b, w)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # Python's cyclic collector must not run inside the capture: collecting an old engine's
        # graphs there destroys them mid-capture, which CUDA forbids (measured on the H200: a second
        # engine's first capture failed that way). Collect first, then hold it off.
        gc.collect()
        collecting = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.graph(graph, pool=self._pool):
                out = self._forward(b, w)
        except RuntimeError as e:  # a capture CUDA refused: this shape runs eager, and says so
            self.stats.capture_errors.append(f"batch {b}, width {w}: {type(e).__name__}: {str(e).splitlines()[0]}")
            return None, None
        finally:
            if collecting:
                gc.enable()
        if self._pool is None:
            self._pool = graph.pool()
        self.stats.captured += 1
        return graph, out

    def _fill(self, b: int, w: int, ids: list[int], pos: list[int], slots: list[int], tables: list[list[int]],
              ctx: list[int]) -> None:  # fmt: skip
        """Copy one step's inputs into the buffers; rows n..b-1 are padding rows."""
        n = len(ids)
        spare = self.scratch_block
        host = np.full((b, w), spare, dtype=np.int64)
        for i, t in enumerate(tables):
            host[i, : len(t)] = t
        cols = np.empty((4, b), dtype=np.int64)
        cols[0, :n], cols[0, n:] = ids, 0
        cols[1, :n], cols[1, n:] = pos, 0
        cols[2, :n], cols[2, n:] = slots, spare * self.block_size
        cols[3, :n], cols[3, n:] = ctx, 1
        dev = self.model.device
        packed = torch.from_numpy(cols).to(dev, non_blocking=False)
        self.ids[:b].copy_(packed[0])
        self.pos[:b].copy_(packed[1])
        self.slots[:b].copy_(packed[2])
        self.ctx[:b].copy_(packed[3])
        self.table[:b, :w].copy_(torch.from_numpy(host).to(dev))
