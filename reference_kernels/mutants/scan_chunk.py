"""Mutant: the chunked linear-attention scan with its chunk size chosen from the batch.

Chunked scan kernels pick the chunk length from the workload (more, shorter chunks when few
sequences leave the GPU idle). The chunk boundaries move the arithmetic (intra-chunk matmuls
against state passed between chunks), so a sequence's output and state depend on how many
sequences share the call, and a chunked prefill whose pieces are not multiples of the chunk
differs from the whole prefill; decode is the recurrent step, which differs from both. Here:
chunks of ``SMALL`` tokens for at most ``SMALL_BATCH`` sequences, ``LARGE`` above.
``seen_rows`` overrides the batch the heuristic sees (``fused_norm_mutants.per_call``).
"""

from __future__ import annotations

from ..linear_attention import chunked_scan, recurrent_step

SMALL_BATCH, SMALL, LARGE = 2, 16, 32


def scan_chunk_by_batch(q, k, v, g, state=None, *, seen_rows: int | None = None, small: int = SMALL,
                        large: int = LARGE):  # fmt: skip
    if q.shape[1] == 1 and state is not None:
        return recurrent_step(q, k, v, g, state)
    b = q.shape[0] if seen_rows is None else seen_rows
    return chunked_scan(q, k, v, g, state, chunk=small if b <= SMALL_BATCH else large)
