"""Stock collectives as torch ships them (gloo on CPU, NCCL on CUDA): what a TP engine calls.

The NCCL rows differ only in the environment their ranks were started with (``nccl_configs``);
the call is the same ``dist.all_reduce``, so one function serves every configuration.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def local_sum(parts: torch.Tensor) -> torch.Tensor:
    """This rank's contributions summed by ``torch.sum`` (what a rank's local GEMM hands over)."""
    return parts[0].clone() if parts.shape[0] == 1 else parts.sum(0)


def gloo_all_reduce(parts: torch.Tensor, group: object = None) -> torch.Tensor:
    """``dist.all_reduce(SUM)``: the backend (gloo; NCCL under its environment) picks the algorithm
    and its segments from the message size."""
    x = local_sum(parts).contiguous()
    dist.all_reduce(x, op=dist.ReduceOp.SUM, group=group)
    return x


nccl_all_reduce = gloo_all_reduce  # the same call on an NCCL group; the name says where it runs


def _reduce_scatter(out: torch.Tensor, x: torch.Tensor, group: object) -> None:
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor  # renamed in torch 2.13
    fn(out, x, op=dist.ReduceOp.SUM, group=group)


def reduce_scatter_all_gather(parts: torch.Tensor, group: object = None) -> torch.Tensor:
    """Reduce-scatter then all-gather of the flat message (padded to a multiple of the world size):
    the two halves sequence parallelism splits an all-reduce into."""
    x = local_sum(parts)
    w = dist.get_world_size(group)
    flat = x.reshape(-1)
    n = flat.numel()
    shard = -(-n // w)
    padded = torch.zeros(shard * w, dtype=x.dtype, device=x.device)
    padded[:n] = flat
    mine = torch.empty(shard, dtype=x.dtype, device=x.device)
    _reduce_scatter(mine, padded, group)
    full = torch.empty(shard * w, dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(full, mine, group=group)
    return full[:n].reshape(x.shape)
