"""Tensor parallelism for the bundled engine (``--tensor-parallel N``): gloo ranks on CPU, NCCL on CUDA.

Megatron-style sharding: column-parallel q/k/v and gate/up (each rank its heads and its slice of
the intermediate), row-parallel o and down (each rank a partial product over its slice, summed by
an all-reduce), a vocab-parallel LM head (each rank its vocabulary rows; logits gathered, an exact
concatenation). The scheduler, sampler and block tables stay in the engine's process; each step's
flat tensors go to ``N`` spawned ranks (``collectives.group.RankPool``), each holding its shard and
its slice of the KV cache, and the logits come back once every rank agreed.

Where the ranks run: with ``device="cpu"`` on a gloo group over 127.0.0.1; with ``device="cuda"``
on an NCCL group, rank ``r`` on ``cuda:r`` (its weights, KV slice and step tensors there, the
engine's CUDA kernels built for that device), started under the named NCCL configuration
``cfg.nccl_config``. Invariant mode all-reduces with the catalogue's ``reference`` (the same row
on both backends), default mode with ``torch-gloo`` on CPU and the ``torch-nccl`` row of the
chosen configuration on CUDA (:func:`collective`). The ranks' forward is always eager: a CUDA graph
would have to be captured in every rank around the collectives, which this runner does not do.

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

ALLREDUCE = {"invariant": INVARIANT_KERNELS["allreduce"], "default": DEFAULT_KERNELS["allreduce"]}  # gloo
_RANK_STATE: dict[str, tuple[Model, Kernels, list]] = {}  # per rank process: key -> shard


def on_cuda(cfg: EngineConfig) -> bool:
    """Whether the ranks are NCCL ranks on GPUs (``device`` cuda or cuda:N) rather than CPU gloo."""
    return cfg.device == "cuda" or cfg.device.startswith("cuda:")


def collective(cfg: EngineConfig) -> str:
    """The catalogue's ``allreduce`` row the ranks call: ``reference`` in invariant mode; in default
    mode ``torch-gloo`` on CPU, on CUDA the stock NCCL row of ``cfg.nccl_config`` (``torch-nccl``
    under NCCL's defaults), so the matrix names the pinning the ranks really run under."""
    if cfg.batch_invariant or not on_cuda(cfg):
        return ALLREDUCE[cfg.mode]
    from ..reference_kernels.collectives.nccl_configs import STOCK_ROWS

    return next(row for row, conf in STOCK_ROWS.items() if conf == cfg.nccl_config)


def check_shardable(cfg: EngineConfig) -> None:
    """ValueError naming what does not split over ``cfg.tensor_parallel`` ranks, or the GPUs missing."""
    m, tp = cfg.model, cfg.tensor_parallel
    if on_cuda(cfg):
        gpus = torch.cuda.device_count()
        if tp > gpus:
            raise ValueError(f"--tensor-parallel {tp} on {cfg.device} needs {tp} GPUs (one NCCL rank each); "
                             f"{gpus} CUDA device(s) here")  # fmt: skip
    elif cfg.device != "cpu":
        raise ValueError(f"--tensor-parallel runs on CPU gloo or CUDA NCCL ranks, not on {cfg.device}")
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
    head = torch.zeros((per, model.lm_head.shape[1]), dtype=model.lm_head.dtype, device=model.lm_head.device)
    rows = model.lm_head[rank * per : (rank + 1) * per]
    head[: rows.shape[0]] = rows
    model.lm_head = head
    model.heads, model.kv_heads = cfg.heads // tp, cfg.kv_heads // tp


def _gather_vocab(x: torch.Tensor, vocab: int, group: object) -> torch.Tensor:
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=-1)[:, :vocab]


def _load(where: torch.Tensor, *, cfg: EngineConfig, num_blocks: int, key: str, group: object) -> torch.Tensor:
    """On each rank: build the model, keep this rank's shard, allocate its KV-cache slice.

    ``where`` is a placeholder the pool has moved to the rank's device (``cuda:r`` under NCCL, CPU
    under gloo), so the weights, the kernels and the cache are made there. Returns the device's
    index (-1: CPU), which the engine checks against the rank."""
    import torch.distributed as dist

    from ..reference_kernels.catalogue import implementation

    rank, tp = dist.get_rank(group), dist.get_world_size(group)
    m, dev = cfg.model, where.device
    weights = load_hf_weights(cfg.model_path, m) if cfg.model_path else synthetic_weights(m, dev)
    model = Model(m, weights, dev)
    vocab = model.lm_head.shape[0]
    shard(model, rank, tp)
    allreduce = implementation("allreduce", collective(cfg))
    model.reduce = lambda x: allreduce(x[None], group)
    model.gather_vocab = lambda x: _gather_vocab(x, vocab, group)
    kern = Kernels(cfg, dev, model.kv_heads)  # the engine's kernels for this device (CUDA: Triton, cuBLAS)
    shape = (num_blocks + 1, cfg.block_size, model.kv_heads, m.head_dim)
    dt = torch_dtype(m.dtype)
    kv = [(torch.zeros(shape, dtype=dt, device=dev), torch.zeros(shape, dtype=dt, device=dev)) for _ in range(m.layers)]
    _RANK_STATE[key] = (model, kern, kv)
    return torch.tensor([-1 if dev.index is None else dev.index])


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
        m[k] = None if m[k] is None else torch.tensor(m[k], dtype=torch.long, device=model.device)
    batch = AttnBatch(**m)
    with torch.inference_mode():
        hidden = model.forward(kern, ids, pos, batch, kv)
        return model.logits(kern, hidden[rows])


def eager_why(cfg: EngineConfig) -> str | None:
    """Why decode runs eager where graphs were asked for (``cuda_graphs`` on, or auto on CUDA): the
    route and ``/server_info`` say so, never silently. None where none was asked (off; auto on CPU)."""
    if cfg.cuda_graphs == "off" or (cfg.cuda_graphs == "auto" and not on_cuda(cfg)):
        return None
    return f"forward eager on the ranks (cuda_graphs {cfg.cuda_graphs!r}: no graphs on tensor-parallel ranks)"


class TPModelRunner(ModelRunner):
    """The engine's model runner with the forward on ``cfg.tensor_parallel`` gloo or NCCL ranks."""

    def __init__(self, cfg: EngineConfig, model: Model, kernels: Kernels, num_blocks: int):
        from ..reference_kernels.collectives.group import RankPool
        from ..reference_kernels.collectives.nccl_configs import config

        check_shardable(cfg)
        self.cfg, self.model, self.kern = cfg, model, kernels
        self.kv = []  # on the ranks
        self.scratch_slot = num_blocks * cfg.block_size
        self.tp = cfg.tensor_parallel
        self.allreduce = collective(cfg)
        kernels.implementations["allreduce"] = self.allreduce
        self.eager_why = eager_why(cfg)
        note = f"; {self.eager_why}" if self.eager_why else ""
        if on_cuda(cfg):
            self.nccl_config = cfg.nccl_config
            kernels.routes["allreduce"] = (f"{self.allreduce}: nccl under {cfg.nccl_config}, {self.tp} rank(s) on "
                                           f"cuda:0..{self.tp - 1}, after o and down{note}")  # fmt: skip
            pool = partial(RankPool, backend="nccl", env=config(cfg.nccl_config).environment())
        else:
            kernels.routes["allreduce"] = f"{self.allreduce}: gloo, {self.tp} ranks on 127.0.0.1, after o and down{note}"
            pool = RankPool
        self.key = uuid.uuid4().hex
        self.pool = pool(self.tp, (self.tp,), call_timeout=cfg.tensor_parallel_timeout_s)
        load = partial(_load, cfg=cfg, num_blocks=num_blocks, key=self.key)
        where = self.pool.run(load, self.tp, [[torch.zeros(1)]] * self.tp)
        self.rank_devices = ["cpu" if int(w) < 0 else f"cuda:{int(w)}" for w in where]
        want = [f"cuda:{r}" for r in range(self.tp)] if on_cuda(cfg) else ["cpu"] * self.tp
        if self.rank_devices != want:
            self.pool.close("ranks on the wrong devices", failed=True)
            raise RuntimeError(f"tensor-parallel ranks loaded on {self.rank_devices}, expected {want}")

    def logits(self, ids: torch.Tensor, pos: torch.Tensor, meta: AttnBatch, rows: torch.Tensor) -> torch.Tensor:
        """The ranks' logits of ``rows``, on the engine's device (its sampler runs there). The step's
        tensors travel as CPU bytes; the pool moves them to each rank's device."""
        from ..reference_kernels.collectives.group import same_on_every_rank

        step = partial(_step, meta=_meta_plain(meta), key=self.key)
        args = [t.cpu() for t in (ids, pos, rows)]
        return same_on_every_rank(self.pool.run(step, self.tp, [args] * self.tp)).to(self.model.device)

    def close(self) -> None:
        self.pool.close()
