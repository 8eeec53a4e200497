"""Turns one scheduled step into flat tensors, runs the model once, returns logits per request.

All of a step's tokens (prefill chunks and decodes) go through the model in one forward, so the
GEMMs see the step's whole token count. A decode-only step replays a CUDA graph where graphs are
on (`decode_graphs`: padded to the capture ladder's bucket). With graphs off and
`cuda_graph_buckets` set, the token batch of an all-decode step is padded up to the next bucket
eagerly, as CUDA-graph replay would (a control knob).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import EngineConfig
from .decode_graphs import DecodeGraphs
from .kernels import AttnBatch, Kernels
from .model import Model
from .scheduler import Scheduled
from .weights import torch_dtype


@dataclass
class StepLogits:
    """Logits of the sampled rows, of the prompt-logprob rows of each item that asked, and of every
    verified row of each item that carries drafts."""

    sample_logits: torch.Tensor  # [num sampled items, V] fp32, in item order
    sample_items: list[int]  # item index of each row above (items with drafts are not among them)
    prompt_logits: dict[int, torch.Tensor]  # item index -> [rows, V] fp32 for positions start..
    num_tokens: int  # tokens through the model (padding included)
    verify_logits: dict[int, torch.Tensor] = field(default_factory=dict)  # item -> [drafts + 1, V]
    graph: bool = False  # replayed from a captured (or, on CPU, static-buffer) decode graph


def graphs_wanted(cfg: EngineConfig) -> bool:
    """Whether decode steps go through `DecodeGraphs`: "on" always (CPU: without a capture), "auto"
    on CUDA at tensor_parallel 1 for dense models."""
    if cfg.tensor_parallel > 1 or cfg.cuda_graphs == "off":
        return False
    return cfg.cuda_graphs == "on" or (cfg.device.startswith("cuda") and not cfg.model.n_experts)


def _plain_decode(it: Scheduled) -> bool:
    """One sampled token from a context, no drafts, no prompt-logprob rows: what a graph replays."""
    seq = it.seq
    prompt_rows = (
        seq.prompt_logprobs is not None and not seq.prompt_logprobs_sent and it.start < seq.num_prompt - 1
    )
    return it.n == 1 and it.start > 0 and not it.draft and it.sample and not prompt_rows


class ModelRunner:
    graphs: DecodeGraphs | None = None
    eager_why: str | None = None  # why decode runs eager although graphs were asked (reported)
    nccl_config: str | None = None  # the NCCL configuration of tensor-parallel CUDA ranks

    def __init__(self, cfg: EngineConfig, model: Model, kernels: Kernels, num_blocks: int):
        self.cfg = cfg
        self.model = model
        self.kern = kernels
        m = model.cfg
        dtype = torch_dtype(m.dtype)
        # One spare block at the end takes the K/V writes of padding rows.
        shape = (num_blocks + 1, cfg.block_size, m.kv_heads, m.head_dim)
        self.kv = [
            (
                torch.zeros(shape, dtype=dtype, device=model.device),
                torch.zeros(shape, dtype=dtype, device=model.device),
            )
            for _ in range(m.layers)
        ]
        self.scratch_slot = num_blocks * cfg.block_size
        if graphs_wanted(cfg) and cfg.graph_ladder:
            self.graphs = DecodeGraphs(model, kernels, self.kv, cfg.graph_ladder, cfg.block_size, num_blocks,
                                       capture=model.device.type == "cuda")  # fmt: skip

    def logits(self, ids: torch.Tensor, pos: torch.Tensor, meta: AttnBatch, rows: torch.Tensor) -> torch.Tensor:
        """One forward over the step's tokens, fp32 logits of ``rows`` (tensor_parallel overrides it)."""
        hidden = self.model.forward(self.kern, ids, pos, meta, self.kv)
        return self.model.logits(self.kern, hidden[rows])

    def _replay(self, items: list[Scheduled]) -> StepLogits | None:
        """A decode-only step through the graphs (None: it runs eager)."""
        bs = self.cfg.block_size
        ids, pos, slots, tables, ctx = [], [], [], [], []
        for it in items:
            seq, p = it.seq, it.start
            ids.append(seq.token_ids[p])
            pos.append(p)
            slots.append(seq.block_table[p // bs] * bs + p % bs)
            tables.append(seq.block_table)
            ctx.append(p + 1)
        logits = self.graphs.run(ids, pos, slots, tables, ctx)
        if logits is None:
            return None
        return StepLogits(sample_logits=logits, sample_items=list(range(len(items))), prompt_logits={},
                          num_tokens=self.graphs.bucket(len(items)) or len(items), graph=True)  # fmt: skip

    def _pad_to(self, items: list[Scheduled], t: int) -> int:
        if self.graphs is not None or not self.cfg.cuda_graph_buckets or not all(it.is_decode for it in items):
            return t
        for b in self.cfg.cuda_graph_buckets:
            if b >= t:
                return b
        return t

    @torch.inference_mode()
    def run(self, items: list[Scheduled]) -> StepLogits:
        if self.graphs is not None and all(_plain_decode(it) for it in items):
            replayed = self._replay(items)
            if replayed is not None:
                return replayed
        bs = self.cfg.block_size
        dev = self.model.device
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        meta = AttnBatch([], [], [], [], torch.empty(0))
        for i, it in enumerate(items):
            seq = it.seq
            meta.q_starts.append(len(ids))
            meta.q_lens.append(it.n)
            meta.ctx_lens.append(it.start + it.n)
            meta.block_tables.append(seq.block_table)
            if it.n == 1 and it.start > 0:
                meta.decode_idx.append(i)
            known = seq.token_ids + list(it.draft) if it.draft else seq.token_ids
            for p in range(it.start, it.start + it.n):
                ids.append(known[p])
                pos.append(p)
                slots.append(seq.block_table[p // bs] * bs + p % bs)
        real = len(ids)
        padded = self._pad_to(items, real)
        ids += [0] * (padded - real)
        pos += [0] * (padded - real)
        slots += [self.scratch_slot] * (padded - real)
        meta.slot_mapping = torch.tensor(slots, dtype=torch.long, device=dev)
        if meta.decode_idx:
            width = max(len(meta.block_tables[i]) for i in meta.decode_idx)
            table = [
                meta.block_tables[i] + [0] * (width - len(meta.block_tables[i])) for i in meta.decode_idx
            ]
            meta.block_table_tensor = torch.tensor(table, dtype=torch.long, device=dev)
            meta.decode_ctx = torch.tensor([meta.ctx_lens[i] for i in meta.decode_idx], device=dev)
        rows: list[int] = []
        sample_items: list[int] = []
        prompt_rows: dict[int, tuple[int, int]] = {}
        verify_rows: dict[int, tuple[int, int]] = {}
        for i, it in enumerate(items):
            if it.draft:  # the row of its last real token, then one per draft
                verify_rows[i] = (len(rows), len(it.draft) + 1)
                rows.extend(range(meta.q_starts[i] + it.n - len(it.draft) - 1, meta.q_starts[i] + it.n))
            elif it.sample:
                sample_items.append(i)
            seq = it.seq
            if (
                seq.prompt_logprobs is not None
                and not seq.prompt_logprobs_sent
                and it.start < seq.num_prompt - 1
            ):
                end = min(it.start + it.n, seq.num_prompt - 1)  # row p scores prompt token p + 1
                first = max(it.start, len(seq.prompt_logprobs) - 1)  # skip rows recomputed after preemption
                if end > first:
                    prompt_rows[i] = (len(rows), end - first)
                    base = meta.q_starts[i] - it.start
                    rows.extend(range(base + first, base + end))
        sample_start = len(rows)
        rows.extend(meta.q_starts[i] + items[i].n - 1 for i in sample_items)
        logits = self.logits(
            torch.tensor(ids, dtype=torch.long, device=dev),
            torch.tensor(pos, dtype=torch.long, device=dev),
            meta,
            torch.tensor(rows, dtype=torch.long, device=dev),
        )
        return StepLogits(
            sample_logits=logits[sample_start:],
            sample_items=sample_items,
            prompt_logits={i: logits[a : a + n] for i, (a, n) in prompt_rows.items()},
            num_tokens=padded,
            verify_logits={i: logits[a : a + n] for i, (a, n) in verify_rows.items()},
        )
