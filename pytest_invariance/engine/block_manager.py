"""Paged KV cache bookkeeping: fixed-size blocks, reference counts, optional prefix cache.

A full block is identified by a chained hash over (parent hash, its tokens); with the prefix cache
on, a new request reuses the blocks of any earlier request that shares a block-aligned prefix.
Freed blocks keep their hash until they are handed out again, so a later identical prompt still hits.
"""

from __future__ import annotations

import hashlib
from collections import deque

from .sequence import Sequence


def block_hash(parent: bytes, tokens: list[int]) -> bytes:
    """Chained hash of one full block (blake2b: stable across processes, unlike hash())."""
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(b"".join(t.to_bytes(4, "little", signed=True) for t in tokens))
    return h.digest()


class BlockManager:
    """Hands out cache blocks to sequences. Blocks are reused first-freed-first (FIFO)."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_cache: bool = False):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_cache = enable_prefix_cache
        self.free: deque[int] = deque(range(num_blocks))
        self.ref = [0] * num_blocks
        self.hash_of: list[bytes | None] = [None] * num_blocks
        self.tokens_of: dict[int, tuple[int, ...]] = {}
        self.by_hash: dict[bytes, int] = {}
        self.hits = 0  # blocks served from the prefix cache
        self.queries = 0  # full prompt blocks looked up

    @property
    def num_free(self) -> int:
        return len(self.free)

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        """Extra blocks `seq` needs to hold `num_tokens` tokens."""
        return max(0, -(-num_tokens // self.block_size) - len(seq.block_table))

    def _take(self) -> int:
        b = self.free.popleft()
        old = self.hash_of[b]
        if old is not None and self.by_hash.get(old) == b:
            del self.by_hash[old]
        self.hash_of[b] = None
        self.tokens_of.pop(b, None)
        self.ref[b] = 1
        return b

    def match_prefix(self, seq: Sequence) -> int:
        """At admission: share cached blocks of the prompt; returns the number of cached tokens.

        At most (prompt - 1) tokens come from the cache, so the last prompt token always runs
        through the model (it yields the first logits) and never writes into a shared block.
        """
        if not self.enable_prefix_cache or seq.block_table or seq.params.prompt_logprobs is not None:
            return 0  # prompt logprobs need every prompt position computed, as in vLLM
        bs = self.block_size
        parent = b""
        for i in range((seq.num_prompt - 1) // bs):
            toks = seq.prompt_ids[i * bs : (i + 1) * bs]
            h = block_hash(parent, toks)
            self.queries += 1
            b = self.by_hash.get(h)
            if b is None or self.tokens_of.get(b) != tuple(toks):
                break
            if self.ref[b] == 0:
                self.free.remove(b)
            self.ref[b] += 1
            seq.block_table.append(b)
            seq.block_hashes.append(h)
            parent = h
            self.hits += 1
        n = len(seq.block_table) * bs
        seq.num_computed = seq.num_cached_prefix = n
        return n

    def allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow `seq`'s block table to hold `num_tokens`; False (nothing taken) if blocks run out."""
        need = self.blocks_needed(seq, num_tokens)
        if need > len(self.free):
            return False
        for _ in range(need):
            seq.block_table.append(self._take())
        return True

    def commit(self, seq: Sequence) -> None:
        """Register the hashes of `seq`'s newly completed full blocks (after a forward)."""
        if not self.enable_prefix_cache:
            return
        bs = self.block_size
        for i in range(len(seq.block_hashes), seq.num_computed // bs):
            toks = seq.token_ids[i * bs : (i + 1) * bs]
            parent = seq.block_hashes[-1] if seq.block_hashes else b""
            h = block_hash(parent, toks)
            seq.block_hashes.append(h)
            b = seq.block_table[i]
            if h not in self.by_hash:
                self.by_hash[h] = b
                self.hash_of[b] = h
                self.tokens_of[b] = tuple(toks)

    def truncate(self, seq: Sequence, num_tokens: int) -> None:
        """Give back the blocks past the first `num_tokens` tokens (a speculative step's rejected
        positions); the slots past `num_tokens` in the kept last block are rewritten before use."""
        keep = -(-num_tokens // self.block_size)
        if keep < len(seq.block_hashes):
            raise ValueError(f"cannot truncate below {len(seq.block_hashes)} committed blocks")
        while len(seq.block_table) > keep:
            b = seq.block_table.pop()
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free.append(b)

    def release(self, seq: Sequence) -> None:
        """Drop `seq`'s references; blocks at zero go back to the free queue (hash kept)."""
        for b in reversed(seq.block_table):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free.append(b)
        seq.block_table = []
        seq.block_hashes = []

    def flush(self) -> None:
        """Forget every cached prefix (blocks in use stay valid for their sequences)."""
        self.by_hash.clear()
        self.tokens_of.clear()
        self.hash_of = [None] * self.num_blocks
