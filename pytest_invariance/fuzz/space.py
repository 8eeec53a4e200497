"""The fuzz space of one target, from what it reports about itself (``/server_info``).

The prompt lengths worth visiting are the target's own: its KV block (``page_size`` /
``block_size``) and its prefill chunk (``chunked_prefill_size`` / vLLM's ``max_num_batched_tokens``),
each -1, at, +1. A server that reports neither gets vLLM's GPU block (16) and a 512-token chunk,
and the record says they were assumed.
"""

from __future__ import annotations

from .strategies import Space, probe_ids

DEFAULT_BLOCK, DEFAULT_CHUNK = 16, 512
CHUNK_CAP = 1024  # a real server's 8192-token chunk costs a prefill per example; its edge is out of a quick budget


def boundaries_of(info: dict | None) -> tuple[int, int, list[str]]:
    """(block, chunk, which of them were assumed) from a ``/server_info``-like dict."""
    info = info or {}
    assumed = []
    block = info.get("page_size") or info.get("block_size")
    chunk = info.get("chunked_prefill_size") or info.get("chunk_size") or info.get("max_num_batched_tokens")
    if not isinstance(block, int) or block < 1:
        block, assumed = DEFAULT_BLOCK, [*assumed, "block"]
    if not isinstance(chunk, int) or chunk < 1:
        chunk, assumed = DEFAULT_CHUNK, [*assumed, "chunk"]
    return block, min(chunk, CHUNK_CAP), assumed


def space_for(info: dict | None, *, model: str | None, params: dict[str, tuple[str, ...]], seed: int = 0,
              probe_tokens: int | None = None, probe_max_tokens: int = 8, extras: bool = True,
              text_prompts: bool = False, max_neighbours: int = 4) -> Space:  # fmt: skip
    """The space: probe of ``probe_tokens`` (default one block + 1, so its prefill crosses a block
    edge), neighbours up to the chunk edge + 1 (within the server's ``max_model_len``)."""
    block, chunk, _ = boundaries_of(info)
    max_model_len = (info or {}).get("max_model_len")
    room = (max_model_len - 64) if isinstance(max_model_len, int) and max_model_len > 128 else 2048
    max_len = max(1, min(max(chunk, 2 * block) + 2, room))
    n = probe_tokens or block + 1
    return Space(probe_ids=probe_ids(min(n, max_len), seed), probe_max_tokens=probe_max_tokens, model=model,
                 block=block, chunk=chunk, max_len=max_len, params=params, extras=extras,
                 text_prompts=text_prompts, max_neighbours=max_neighbours)  # fmt: skip
