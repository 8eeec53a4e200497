"""Continuous batching: insertion-ordered, new requests admitted every step, prefill and decode mixed.

Each step spends a token budget: running sequences first, in arrival order (one token for a
decoding sequence, the next prefill chunk otherwise), then waiting requests in arrival order while
seats, budget and blocks last. A prefill chunk is cut by `chunk_size` and by what is left of the
budget, so in default mode a prompt's chunk boundaries depend on its neighbours (the chunking
control). In invariant mode non-final chunks end on block boundaries.
When blocks run out the youngest running sequence is preempted and later recomputed.
With speculative decoding on, a decoding sequence's one token is followed by its n-gram drafts
(as many as the budget and its max_tokens leave room for), verified in the same step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .config import EngineConfig
from .sequence import Sequence, Status
from .speculative import propose_ngram


@dataclass
class Scheduled:
    """`n` tokens of `seq` from position `start`; `sample` when they end its known tokens. The last
    `len(draft)` of the `n` are draft tokens (not yet the sequence's) to verify."""

    seq: Sequence
    start: int
    n: int
    draft: tuple[int, ...] = field(default=())

    @property
    def sample(self) -> bool:
        return self.start + self.n - len(self.draft) == self.seq.num_tokens

    @property
    def is_decode(self) -> bool:
        return self.n == 1 and self.start >= self.seq.num_prompt


class Scheduler:
    def __init__(self, cfg: EngineConfig, blocks: BlockManager):
        self.cfg = cfg
        self.max_position = cfg.model.max_position
        self.blocks = blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preempted = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take a finished or aborted sequence out of the queues and free its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.release(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def _chunk(self, seq: Sequence, budget: int) -> int:
        n = min(seq.remaining, self.cfg.chunk_size, budget)
        bs = self.cfg.block_size
        if self.cfg.batch_invariant and n < seq.remaining and self.cfg.chunk_size >= bs:
            n = (seq.num_computed + n) // bs * bs - seq.num_computed
        return max(0, n)

    def _draft(self, seq: Sequence, budget: int) -> tuple[int, ...]:
        """Drafts for a decoding sequence: at most k, one fewer than the tokens it may still emit and
        than the budget left after its own token."""
        k = self.cfg.spec.k
        if not k or seq.remaining != 1 or seq.num_computed < seq.num_prompt:
            return ()
        room = min(k, budget - 1, seq.params.max_tokens - len(seq.output_ids) - 1,
                   self.max_position - seq.num_tokens - 1)  # fmt: skip
        return tuple(propose_ngram(seq.token_ids, room)) if room > 0 else ()

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.blocks.release(seq)
        seq.num_computed = seq.num_cached_prefix = 0
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        self.num_preempted += 1

    def schedule(self) -> list[Scheduled]:
        budget = self.cfg.max_num_batched_tokens
        out: list[Scheduled] = []
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = self._chunk(seq, budget)
            if n == 0:
                i += 1
                continue
            draft = self._draft(seq, budget)
            n += len(draft)
            while not self.blocks.allocate(seq, seq.num_computed + n):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.status is not Status.RUNNING:
                break  # seq preempted itself: it was the youngest, nothing after it
            out.append(Scheduled(seq, seq.num_computed, n, draft))
            budget -= n
            i += 1
        while self.waiting and len(self.running) < self.cfg.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            if not seq.block_table:
                self.blocks.match_prefix(seq)
            n = self._chunk(seq, budget)
            if n == 0 or not self.blocks.allocate(seq, seq.num_computed + n):
                if not self.running and not out and n > 0:
                    raise RuntimeError(
                        f"request {seq.request_id} does not fit in the KV cache ({self.blocks.num_blocks} blocks)"
                    )
                self.blocks.release(seq)
                seq.num_computed = seq.num_cached_prefix = 0
                break
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)
            out.append(Scheduled(seq, seq.num_computed, n))
            budget -= n
        return out
