"""Sweeps where a prompt's prefix is shared or cached: requests sharing a prefix at page and chunk
boundaries +-1 (prefix), and the same request cold and warm in the prefix cache (cache)."""

from __future__ import annotations

import random
import secrets
from typing import Any

from pytest_invariance.adapters import AdapterError
from pytest_invariance.oracles import sequences as S

from .outcome import Outcome, progress
from .prompts import gen, neighbour, shared_prefix
from .target import Target, dispatch_shape, send


def prefix_lengths(info: dict | None) -> list[int]:
    """Shared-prefix lengths (tokens) at page/block and prefill-chunk boundaries, +-1."""
    info = info or {}
    page = int(info.get("page_size") or info.get("block_size") or 16)
    chunk = int(info.get("chunked_prefill_size") or info.get("chunk_size") or 256)
    chunk = min(chunk, 1024)  # a real server's 8192-token chunk is out of reach of a quick sweep
    return sorted({n for b in (page, chunk) for n in (b - 1, b, b + 1) if n >= 1})


def sweep_prefix(t: Target, profile: str, seed: int) -> Outcome:
    """Requests sharing a prefix whose length sits at a page/chunk boundary +-1: the probe alone vs
    the probe concurrent with requests that share its prefix, token ids and logprob bits per step."""
    n = 4 if profile == "quick" else 16
    params = gen(t, 16)
    lengths = list(t.options.prefix_lengths or prefix_lengths(t.info))
    shape = {"sweep": "prefix", "prefix_lengths": lengths, "batch": n, "max_tokens": params.max_tokens,
             **dispatch_shape(t)}  # fmt: skip
    rng = random.Random(seed)
    per_length: dict[str, Any] = {}
    bad: list[int] = []
    first: dict[str, Any] = {}
    bar = progress(f"prefix {t.name}", len(lengths) * (1 + n))
    try:
        for length in lengths:
            prompts = shared_prefix(t, rng, length, n)
            alone = t.adapter.generate([prompts[0]], params, progress=bar)[0]
            cs = send(t, prompts, params, seed * 1000 + length, bar)
            d = S.step_difference(alone.token_ids, alone.logprobs, cs[0].token_ids, cs[0].logprobs)
            per_length[str(length)] = d
            if d is not None:
                bad.append(length)
                if not first:
                    first = {
                        "batch_size": n,
                        "token_index": d["step"],
                        "label": f"prefix {length}: {d['what']}",
                    }
    except AdapterError as exc:
        return Outcome(
            None,
            {"error": str(exc), "prefix_lengths": per_length},
            f"incomplete: {exc}",
            shape,
            error=str(exc),
        )
    unique = 2 if bad else 1
    ev = {"samples": 2 * len(per_length), "unique": unique, "concurrency": [1, n],
          "points": [{"concurrency": 1, "unique": 1}, {"concurrency": n, "unique": unique}],
          "prefix_lengths": per_length, "differing_prefix_lengths": bad, "first": first}  # fmt: skip
    text = f"{len(lengths)} prefix lengths {lengths}, alone vs {n} sharing: " + (
        f"differ at {bad} (first: {first['label']} at step {first['token_index']})"
        if bad
        else "bitwise equal"
    )
    return Outcome(bool(bad), ev, text, shape)


def sweep_cache(t: Target, profile: str, seed: int) -> Outcome:
    """The same request cold and warm; the warm one must hit the prefix cache, the cold one not.

    A fresh random nonce starts the prompt on every run, so the "cold" request is cold without a
    flush, even on a server that cannot flush and has served this sweep before. Where the server
    reports cached tokens (OpenAI ``usage.prompt_tokens_details.cached_tokens``, SGLang
    ``meta_info.cached_tokens``), the evidence must show cold = 0 and warm > 0; where it does not,
    the hit is not proven and equality is ``vacuous``, never a clean pass."""
    nonce = f"<{secrets.token_hex(6)}> "
    # at least a few KV blocks long: vLLM caches only whole blocks (128 tokens on its CPU build)
    block = int((t.info or {}).get("block_size") or (t.info or {}).get("page_size") or 16)
    prompt = nonce + neighbour(7, max(160, 8 * block))
    params = gen(t, 16, logprobs=0)
    shape = {"sweep": "cache", "prompt_chars": len(prompt), "max_tokens": params.max_tokens,
             "compared": t.options.compared}  # fmt: skip
    try:
        flushed = t.adapter.flush_cache()
        cold = t.adapter.generate([prompt], params)[0]
        warm = t.adapter.generate([prompt], params)[0]
    except AdapterError as exc:
        return Outcome(None, {"error": str(exc)}, f"incomplete: {exc}", shape, error=str(exc))
    hit = warm.cached_tokens
    ev: dict[str, Any] = {"samples": 2, "nonce": nonce.strip(), "flushed": flushed,
                          "cold_cached_tokens": cold.cached_tokens, "warm_cached_tokens": hit}  # fmt: skip
    if hit is not None and hit == 0:
        return Outcome(None, ev, "the warm request did not hit the prefix cache", shape,
                       unsupported="prefix cache off: the warm request reported 0 cached tokens")  # fmt: skip
    blind = None
    if hit is None:
        blind = "cache hit not proven: the server reports no cached tokens"
    elif cold.cached_tokens:
        blind = f"the cold request was served {cold.cached_tokens} tokens from the cache"
    ev["cache_hit"] = "not proven" if blind else "proven (cold 0, warm > 0)"
    diff = S.step_difference(cold.token_ids, cold.logprobs, warm.token_ids, warm.logprobs)
    ev.update(
        unique=1 if diff is None else 2,
        first_step_difference=diff,
        first={"token_index": diff["step"], "label": f"warm {diff['what']}"} if diff else {},
    )
    proof = blind or f"cold 0, warm hit {hit} cached tokens"
    text = f"cold vs warm ({proof}): " + (
        "bitwise equal" if diff is None else f"first {diff['what']} difference at step {diff['step']}"
    )
    return Outcome(diff is not None, ev, text, shape, blind=blind)
