"""Tensor parallelism for the bundled engine on CPU gloo ranks (``--tensor-parallel N``).

Megatron-style sharding: column-parallel q/k/v and gate/up (each rank its heads and its slice of
the intermediate), row-parallel o and down (each rank a partial product over its slice, summed by
an all-reduce), a vocab-parallel LM head (each rank its vocabulary rows; logits gathered, an exact
concatenation). Invariant mode all-reduces with the catalogue's ``reference``, default mode with
``torch-gloo`` (``ALLREDUCE``). The scheduler, sampler and block tables stay in the engine's
process; each step's flat tensors go to ``N`` spawned ranks (``collectives.group.RankPool``), each
holding its shard and its slice of the KV cache, and the logits come back once every rank agreed.

What this promises: within one TP size, invariant mode is batch-invariant (each rank's kernels
are, and the reference all-reduce sums in rank order whatever the token count). Across TP sizes
nothing is promised: each rank's partial GEMM sums its own slice of K, so TP1 and TP2 round
different partial sums (the e2e comparison measures how often that changes a token).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import asdict
from functools import partial

import torch

from .config import EngineConfig
from .kernels import DEFAULT_KERNELS, INVARIANT_KERNELS, AttnBatch, Kernels
from .model import Model
from .model_runner import ModelRunner
from .weights import load_hf_weights, synthetic_weights, torch_dtype

ALLREDUCE = {"invariant": INVARIANT_KERNELS["allreduce"], "default": DEFAULT_KERNELS["allreduce"]}
_RANK_STATE: dict[str, tuple[Model, Kernels, list]] = {}  # per rank process: key -> shard


def check_shardable(cfg: EngineConfig) -> None:
    """ValueError naming what does not split over ``cfg.tensor_parallel`` ranks."""
    m, tp = cfg.model, cfg.tensor_parallel
    if cfg.device != "cpu":
        raise ValueError(f"--tensor-parallel runs on CPU gloo ranks only, not on {cfg.device}")
    if m.n_experts:
        raise ValueError("--tensor-parallel does not shard MoE layers")
    for what, n in (("heads", m.heads), ("kv_heads", m.kv_heads), ("intermediate", m.intermediate)):
        if n % tp:
            raise ValueError(f"--tensor-parallel {tp}: the model's {what} ({n}) do not split evenly")


def shard(model: Model, rank: int, tp: int) -> None:
    """Keep rank ``rank``'s columns / rows of every weight (in place), and its head counts."""
    cfg = model.cfg
    hd = cfg.head_dim
    q_dim, kv_dim = cfg.heads * hd, cfg.kv_heads * hd
    qs = slice(rank * q_dim // tp, (rank + 1) * q_dim // tp)  # q head i uses kv head i // group
    ks = slice(rank * kv_dim // tp, (rank + 1) * kv_dim // tp)
    for lay in model.layers:
        for key in ("qkv", "qkv_bias"):
            w = lay[key]
            if w is not None:
                q, k, v = w[:q_dim], w[q_dim : q_dim + kv_dim], w[q_dim + kv_dim :]
                lay[key] = torch.cat([q[qs], k[ks], v[ks]]).contiguous()
        lay["o"] = lay["o"][:, qs].contiguous()
        gu = lay["gate_up"]
        inter = gu.shape[0] // 2
        mine = slice(rank * inter // tp, (rank + 1) * inter // tp)
        lay["gate_up"] = torch.cat([gu[:inter][mine], gu[inter:][mine]]).contiguous()
        lay["down"] = lay["down"][:, mine].contiguous()
    vocab = model.lm_head.shape[0]
    per = math.ceil(vocab / tp)  # equal shards for all_gather; the last rank's padding rows are zeros
    head = torch.zeros((per, model.lm_head.shape[1]), dtype=model.lm_head.dtype)
    rows = model.lm_head[rank * per : (rank + 1) * per]
    head[: rows.shape[0]] = rows
    model.lm_head = head
    model.heads, model.kv_heads = cfg.heads // tp, cfg.kv_heads // tp


def _gather_vocab(x: torch.Tensor, vocab: int, group: object) -> torch.Tensor:
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=-1)[:, :vocab]


def _load(_: torch.Tensor, *, cfg: EngineConfig, num_blocks: int, key: str, group: object) -> torch.Tensor:
    """On each rank: build the model, keep this rank's shard, allocate its KV-cache slice."""
    import torch.distributed as dist

    from ..reference_kernels.catalogue import implementation

    rank, tp = dist.get_rank(group), dist.get_world_size(group)
    m = cfg.model
    weights = load_hf_weights(cfg.model_path, m) if cfg.model_path else synthetic_weights(m, "cpu")
    model = Model(m, weights, torch.device("cpu"))
    vocab = model.lm_head.shape[0]
    shard(model, rank, tp)
    allreduce = implementation("allreduce", ALLREDUCE[cfg.mode])
    model.reduce = lambda x: allreduce(x[None], group)
    model.gather_vocab = lambda x: _gather_vocab(x, vocab, group)
    kern = Kernels(cfg, torch.device("cpu"), model.kv_heads)
    shape = (num_blocks + 1, cfg.block_size, model.kv_heads, m.head_dim)
    dt = torch_dtype(m.dtype)
    kv = [(torch.zeros(shape, dtype=dt), torch.zeros(shape, dtype=dt)) for _ in range(m.layers)]
    _RANK_STATE[key] = (model, kern, kv)
    return torch.zeros(1)


def _meta_plain(meta: AttnBatch) -> dict:
    """The step's attention metadata as lists (plain pickles, no shared-memory tensors)."""
    d = {k: v for k, v in asdict(meta).items() if not isinstance(v, torch.Tensor)}
    for k in ("slot_mapping", "block_table_tensor", "decode_ctx"):
        t = getattr(meta, k)
        d[k] = None if t is None else t.tolist()
    return d


def _step(ids: torch.Tensor, pos: torch.Tensor, rows: torch.Tensor, *, meta: dict, key: str,
          group: object) -> torch.Tensor:  # fmt: skip
    """On each rank: one forward of its shard over the step, fp32 logits of ``rows`` (all ranks)."""
    model, kern, kv = _RANK_STATE[key]
    m = dict(meta)
    for k in ("slot_mapping", "block_table_tensor", "decode_ctx"):
        m[k] = None if m[k] is None else torch.tensor(m[k], dtype=torch.long)
    batch = AttnBatch(**m)
    with torch.inference_mode():
        hidden = model.forward(kern, ids, pos, batch, kv)
        return model.logits(kern, hidden[rows])


class TPModelRunner(ModelRunner):
    """The engine's model runner with the forward on ``cfg.tensor_parallel`` gloo ranks."""

    def __init__(self, cfg: EngineConfig, model: Model, kernels: Kernels, num_blocks: int):
        from ..reference_kernels.collectives.group import RankPool

        check_shardable(cfg)
        self.cfg, self.model, self.kern = cfg, model, kernels
        self.kv = []  # on the ranks
        self.scratch_slot = num_blocks * cfg.block_size
        self.tp = cfg.tensor_parallel
        self.allreduce = ALLREDUCE[cfg.mode]
        kernels.implementations["allreduce"] = self.allreduce
        kernels.routes["allreduce"] = f"{self.allreduce}: gloo, {self.tp} ranks on 127.0.0.1, after o and down"
        self.key = uuid.uuid4().hex
        self.pool = RankPool(self.tp, (self.tp,), call_timeout=cfg.tensor_parallel_timeout_s)
        load = partial(_load, cfg=cfg, num_blocks=num_blocks, key=self.key)
        self.pool.run(load, self.tp, [[torch.zeros(1)]] * self.tp)

    def logits(self, ids: torch.Tensor, pos: torch.Tensor, meta: AttnBatch, rows: torch.Tensor) -> torch.Tensor:
        from ..reference_kernels.collectives.group import same_on_every_rank

        step = partial(_step, meta=_meta_plain(meta), key=self.key)
        return same_on_every_rank(self.pool.run(step, self.tp, [[ids, pos, rows]] * self.tp))

    def close(self) -> None:
        self.pool.close()
