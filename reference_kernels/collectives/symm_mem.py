"""Torch's symmetric-memory one-shot all-reduce (``torch.ops.symm_mem.one_shot_all_reduce``).

The all-reduce that replaces NCCL for small messages in the engines that use it (vLLM's
``VLLM_ALLREDUCE_USE_SYMM_MEM``, SGLang's ``--enable-torch-symm-mem``; both turn it off in their
invariant modes because they switch to it only below a byte threshold). Each rank copies its
message into a buffer every rank can address (``_symmetric_memory.empty`` + ``rendezvous``) and
one kernel reads all ranks' buffers and sums them. CUDA only; NVLink multicast is not used (that
is ``multimem_all_reduce_``).
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from .stock import local_sum

NAME = "torch-symm-mem"  # the catalogue's row, registered only where :func:`unavailable` is None
_BUFFERS: dict[tuple, torch.Tensor] = {}  # per rank: (group, shape, dtype) -> rendezvoused buffer


def unavailable() -> str | None:
    """Why this torch cannot run the one-shot symmetric-memory all-reduce, or None when it can."""
    try:
        from torch.distributed import _symmetric_memory as symm

        op = torch.ops.symm_mem.one_shot_all_reduce
        for need in ("empty", "rendezvous"):
            getattr(symm, need)
    except (ImportError, AttributeError, RuntimeError) as exc:
        return f"torch {torch.__version__} has no symmetric-memory one-shot all-reduce ({type(exc).__name__}: {exc})"
    del op
    return None


def buffer(shape: torch.Size, dtype: torch.dtype, device: torch.device, group: object = None) -> torch.Tensor:
    """This rank's symmetric buffer of ``shape`` for ``group``, allocated and rendezvoused once.

    Reused across calls: the pool runs one call at a time and waits for every rank's result, so
    no rank refills a buffer another is still reading. Bounded by the distinct message shapes."""
    from torch.distributed import _symmetric_memory as symm

    g = group if group is not None else dist.group.WORLD
    key = (g.group_name, tuple(shape), dtype)
    if key not in _BUFFERS:
        enable = getattr(symm, "enable_symm_mem_for_group", None)
        if enable is not None:  # required before torch 2.8, idempotent (and deprecated) after
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                enable(g.group_name)
        buf = symm.empty(tuple(shape), dtype=dtype, device=device)
        symm.rendezvous(buf, g)  # collective: every rank of the group allocates the same shape
        _BUFFERS[key] = buf
    return _BUFFERS[key]


def symm_mem_all_reduce(parts: torch.Tensor, group: object = None) -> torch.Tensor:
    """Local sum copied into this rank's symmetric buffer, then ``one_shot_all_reduce(buf, "sum")``."""
    x = local_sum(parts).contiguous()
    if x.device.type != "cuda":
        raise ValueError(f"symmetric memory needs CUDA tensors, got {x.device}")
    g = group if group is not None else dist.group.WORLD
    buf = buffer(x.shape, x.dtype, x.device, g)
    buf.copy_(x)
    return torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", g.group_name)
