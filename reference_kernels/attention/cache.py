"""Paged KV cache helpers: write new K/V into slots, and map (sequence, position) to slots.

Layout (same as vLLM/nano-vllm): ``k_cache``/``v_cache`` are
``[num_blocks, block_size, Hkv, D]``; a sequence's position ``p`` lives in block
``block_table[seq, p // block_size]`` at offset ``p % block_size``; the flat
slot index is ``block * block_size + offset``.
"""

from __future__ import annotations

import torch


def write_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    negatives: bool = True,
) -> None:
    """Store ``k``/``v`` ``[T, Hkv, D]`` into the caches at flat slots ``slot_mapping[T]`` (in place).

    A copy, so exact: attention that reads the cache later sees the same bits.
    Negative slots (padding) are skipped, as vLLM does. A caller whose slots are never negative
    passes ``negatives=False``: the check reads the slots on the host (a device sync, which a
    CUDA-graph capture cannot contain).
    """
    if k.shape != v.shape or k.dim() != 3:
        raise ValueError(f"expected k, v [T, Hkv, D] of equal shape, got {tuple(k.shape)}, {tuple(v.shape)}")
    if k_cache.shape[2:] != k.shape[1:]:
        raise ValueError(f"cache heads/dim {tuple(k_cache.shape[2:])} != k heads/dim {tuple(k.shape[1:])}")
    slots = slot_mapping.to(device=k.device, dtype=torch.long)
    if negatives:
        keep = slots >= 0
        if not bool(keep.all()):
            slots, k, v = slots[keep], k[keep], v[keep]
    flat_k = k_cache.view(-1, *k_cache.shape[2:])
    flat_v = v_cache.view(-1, *v_cache.shape[2:])
    flat_k.index_copy_(0, slots, k.to(k_cache.dtype))
    flat_v.index_copy_(0, slots, v.to(v_cache.dtype))


def slots_for(
    block_table: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor, block_size: int
) -> torch.Tensor:
    """Flat slot of position ``pos`` of sequence ``seq`` (broadcasting); positions must be in range."""
    blocks = block_table.long()[seq, torch.div(pos, block_size, rounding_mode="floor")]
    return blocks * block_size + pos % block_size


def slot_mapping_for(
    block_table: torch.Tensor, seq_idx: int, start: int, end: int, block_size: int
) -> torch.Tensor:
    """Slots of positions ``[start, end)`` of one sequence (for ``write_kv``)."""
    pos = torch.arange(start, end, device=block_table.device)
    seq = torch.full_like(pos, seq_idx)
    return slots_for(block_table, seq, pos, block_size)
