"""Batch-invariant attention: varlen prefill and fixed-split-size paged decode.

Public functions (all take bf16/fp16/fp32, accumulate in fp32, return q's dtype):

- ``prefill_varlen(q[total_q, Hq, D], k[total_k, Hkv, D], v, cu_seqlens_q, cu_seqlens_k,
  *, causal=True, scale=None, split_size=SPLIT_SIZE)``: the queries of sequence i are its last
  ``len_q`` positions, so chunked prefill is "prefill of the chunk against prefix + chunk".
- ``prefill_paged(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, scale=None,
  split_size=SPLIT_SIZE)``: the same over a paged cache already holding every position ``< seq_lens``.
- ``decode_paged(q[B, Hq, D], k_cache[num_blocks, block_size, Hkv, D], v_cache, block_table[B,
  max_blocks] int32, seq_lens[B] int32, *, scale=None, split_size=SPLIT_SIZE)``: one query per sequence
  at position ``seq_lens[b] - 1``.
- ``write_kv(k_cache, v_cache, k[T, Hkv, D], v, slot_mapping[T])``: store new K/V (exact copy).

Invariance contract (both paths): KV is cut into splits of ``split_size`` tokens
anchored at absolute position 0 (at 1024, a 3000-token cache is 1024+1024+952 whatever
the batch); each split yields (max, sum, unnormalised output) and splits are merged left to
right. A row's arithmetic depends only on its own keys, so: batch-size, batch-position
and run-to-run invariance; decode at position t == prefill at position t bitwise (write
K/V first, then attend); chunked prefill == whole prefill bitwise for any chunk
boundary (splits are anchored to absolute positions, not to chunk starts; extra
fully-masked key blocks a query tile visits are exact no-ops). Not promised: equality
across ``split_size`` values, or between the torch (CPU) and Triton (CUDA) paths.

``backend``: ``"auto"`` (Triton on CUDA tensors, torch otherwise), ``"torch"`` or
``"triton"`` (on CPU tensors this needs ``TRITON_INTERPRET=1``; tiny shapes only).

Registry families (registered by ``catalogue``):

- ``attention-prefill``: ``fn(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=True, scale=None) -> out``
  with the shapes of ``prefill_varlen``.
- ``attention-decode``: ``fn(q, k_cache, v_cache, block_table, seq_lens, *, scale=None) -> out``
  with the shapes of ``decode_paged``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..device import resolve
from . import torch_ref
from .cache import slot_mapping_for, slots_for, write_kv
from .split import SPLIT_SIZE

__all__ = [
    "SPLIT_SIZE",
    "decode_paged",
    "prefill_paged",
    "prefill_varlen",
    "slot_mapping_for",
    "slots_for",
    "write_kv",
]


def _use_triton(t: torch.Tensor, backend: str, scale: float | None = None) -> bool:
    """Which path runs; refuses a non-positive scale on both (the Triton kernel takes the row max
    before scaling, exact only for a positive scale; the paths promise the same inputs)."""
    if scale is not None and not scale > 0:
        raise ValueError(f"softmax scale must be positive, got {scale}")
    return resolve(t, backend) != "torch"


def _path(name: str, t: torch.Tensor, backend: str, scale: float | None) -> Callable[..., torch.Tensor]:
    """``triton_attn.<name>_triton`` (imported only when it runs) or ``torch_ref.<name>_torch``:
    the path's function, taking the public function's arguments."""
    if not _use_triton(t, backend, scale):
        return getattr(torch_ref, f"{name}_torch")
    from . import triton_attn

    return getattr(triton_attn, f"{name}_triton")


def prefill_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    *,
    causal: bool = True,
    scale: float | None = None,
    split_size: int = SPLIT_SIZE,
    backend: str = "auto",
) -> torch.Tensor:
    """Batch-invariant varlen prefill (see the module docstring)."""
    return _path("prefill_varlen", q, backend, scale)(
        q, k, v, cu_seqlens_q, cu_seqlens_k, causal=causal, scale=scale, split_size=split_size
    )


def prefill_paged(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float | None = None,
    split_size: int = SPLIT_SIZE,
    backend: str = "auto",
) -> torch.Tensor:
    """Causal prefill of each sequence's last ``len_q`` tokens over its paged cache."""
    return _path("prefill_paged", q, backend, scale)(
        q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, scale=scale, split_size=split_size
    )


def decode_paged(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float | None = None,
    split_size: int = SPLIT_SIZE,
    backend: str = "auto",
) -> torch.Tensor:
    """Batch-invariant paged decode with a fixed split size and a fixed-order merge."""
    return _path("decode_paged", q, backend, scale)(
        q, k_cache, v_cache, block_table, seq_lens, scale=scale, split_size=split_size
    )
