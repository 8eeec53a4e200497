"""SGLang-compatible ``POST /generate``.

Speaks what SGLang's own determinism driver and the harness's ``sglang`` adapter need: text or
``input_ids``, single or a list (the answer is an array in input order, ``n`` samples of an item
adjacent), ``sampling_params`` as a dict or a per-item list, and logprobs as
``[logprob, token_id, text-or-null]`` triples. With ``logprob_start_len: 0`` the first
``input_token_logprobs`` entry is null: nothing predicts the first token.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .async_loop import SubmitSpec
from .protocol import (
    APIError,
    GenerateRequest,
    GenerateSamplingParams,
    normalize_stop,
    reject_unsupported,
    validate,
)
from .server_common import (
    SequenceResult,
    ServerContext,
    check_n,
    check_token_ids,
    collect,
    encode_text,
    finite,
    live_outputs,
    make_params,
    new_id,
    resolve_max_tokens,
    sample_seed,
    sse,
    sse_response,
    stop_ids,
    submit,
)
from .server_text import TextTracker, token_text

SGLANG_DEFAULT_MAX_NEW_TOKENS = 128
GREEDY_BELOW = 1e-6  # SGLang turns temperature < 1e-6 into greedy

UNSUPPORTED = {
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
}


def _per_item(value: Any, count: int, param: str) -> list[Any]:
    """A scalar applies to every item; a list must have one entry per item."""
    if isinstance(value, list):
        if len(value) != count:
            raise APIError(f"{param} has {len(value)} entries for {count} inputs", param=param)
        return value
    return [value] * count


def _inputs(ctx: ServerContext, req: GenerateRequest) -> tuple[list[list[int]], bool]:
    """Prompts as id lists, and whether the request was a batch (list) request."""
    if (req.text is None) == (req.input_ids is None):
        raise APIError("exactly one of 'text' and 'input_ids' must be given", param="text")
    if req.text is not None:
        if isinstance(req.text, str):
            return [encode_text(ctx, req.text, "text")], False
        if not req.text:
            raise APIError("text is an empty list", param="text")
        return [encode_text(ctx, t, f"text.{i}") for i, t in enumerate(req.text)], True
    ids = req.input_ids
    if not ids:
        raise APIError("input_ids is empty", param="input_ids")
    if isinstance(ids[0], int):
        return [check_token_ids(ctx, ids, "input_ids")], False  # type: ignore[arg-type]
    return [check_token_ids(ctx, p, f"input_ids.{i}") for i, p in enumerate(ids)], True  # type: ignore[arg-type]


def _finish_reason(r: SequenceResult, max_new_tokens: int) -> dict[str, Any] | None:
    if r.finish_reason is None:
        return None
    if r.finish_reason == "length":
        return {"type": "length", "length": max_new_tokens}
    if r.finish_reason == "stop":
        return {"type": "stop", "matched": r.matched}
    return {"type": "abort", "message": "request aborted"}


class _Item:
    """One (input, sample) pair: its settings and its result."""

    def __init__(self, rid: str, result: SequenceResult, max_new: int, want_lp: bool, start: int, top_n: int):
        self.rid = rid
        self.result = result
        self.max_new = max_new
        self.want_lp = want_lp
        self.start = start
        self.top_n = top_n
        self.t0 = time.monotonic()


def _triples(ctx: ServerContext, pairs: list[tuple[float | None, int]], with_text: bool) -> list[list[Any]]:
    return [[finite(lp), tid, token_text(ctx.tokenizer, tid) if with_text else None] for lp, tid in pairs]


def _render(ctx: ServerContext, item: _Item, with_text: bool, text: str | None = None) -> dict[str, Any]:
    r = item.result
    meta: dict[str, Any] = {
        "id": item.rid,
        "finish_reason": _finish_reason(r, item.max_new),
        "prompt_tokens": len(r.prompt_ids),
        "completion_tokens": len(r.token_ids),
        "e2e_latency": time.monotonic() - item.t0,
    }
    if r.cached_tokens is not None:
        meta["cached_tokens"] = r.cached_tokens
    if item.want_lp:
        meta["output_token_logprobs"] = _triples(
            ctx, list(zip(r.logprobs, r.token_ids, strict=True)), with_text
        )
        if item.top_n > 0:
            meta["output_top_logprobs"] = [
                _triples(ctx, [(lp, t) for t, lp in top], with_text) for top in r.top_logprobs
            ]
        if item.start >= 0:
            plps = r.prompt_logprobs or []
            pairs = list(zip(plps[item.start :], r.prompt_ids[item.start :], strict=False))
            meta["input_token_logprobs"] = _triples(ctx, pairs, with_text)
            if item.top_n > 0:
                tops = (r.prompt_top_logprobs or [])[item.start :]
                meta["input_top_logprobs"] = [
                    None if top is None else _triples(ctx, [(lp, t) for t, lp in top], with_text)
                    for top in tops
                ]
    return {"text": r.text if text is None else text, "output_ids": list(r.token_ids), "meta_info": meta}


async def generate(ctx: ServerContext, request: Request, body: Any) -> Response:
    """``POST /generate`` (and ``PUT``)."""
    req: GenerateRequest = validate(GenerateRequest, body)
    prompts, is_batch = _inputs(ctx, req)
    count = len(prompts)
    sps = _per_item(req.sampling_params, count, "sampling_params")
    sps = [sp or GenerateSamplingParams() for sp in sps]
    ns = {sp.n or 1 for sp in sps}
    if len(ns) > 1:
        raise APIError("all entries of sampling_params must use the same n", param="sampling_params.n")
    n = ns.pop()
    check_n(ctx, n, count, "sampling_params.n")
    want_lps = _per_item(req.return_logprob, count, "return_logprob")
    starts = _per_item(req.logprob_start_len, count, "logprob_start_len")
    top_ns = _per_item(req.top_logprobs_num, count, "top_logprobs_num")
    rids = _per_item(req.rid, count, "rid") if req.rid is not None else [None] * count
    if req.rid is not None and len(set(rids)) != count:
        raise APIError("rid values must be unique", param="rid")

    base = new_id("gen")
    specs, items = [], []
    for i, ids in enumerate(prompts):
        sp = sps[i]
        param = f"sampling_params.{i}" if isinstance(req.sampling_params, list) else "sampling_params"
        try:
            reject_unsupported(sp, UNSUPPORTED)
        except APIError as e:
            raise APIError(e.message, param=f"{param}.{e.param}", code=e.code) from None
        if not isinstance(starts[i], int) or starts[i] < -1 or starts[i] >= len(ids):
            raise APIError(
                f"logprob_start_len must be -1 or in [0, {len(ids)}) for a prompt of {len(ids)} tokens",
                param="logprob_start_len",
            )
        if not isinstance(top_ns[i], int) or not 0 <= top_ns[i] <= 20:
            raise APIError("top_logprobs_num must be in [0, 20]", param="top_logprobs_num")
        stops = normalize_stop(sp.stop, f"{param}.stop")
        max_new = resolve_max_tokens(
            ctx, len(ids), sp.max_new_tokens, SGLANG_DEFAULT_MAX_NEW_TOKENS, f"{param}.max_new_tokens"
        )
        temperature = 1.0 if sp.temperature is None else sp.temperature
        want_lp = bool(want_lps[i])
        start = starts[i] if want_lp else -1
        for s in range(n):
            params = make_params(
                max_tokens=max_new,
                temperature=0.0 if temperature < GREEDY_BELOW else temperature,
                top_p=sp.top_p,
                top_k=-1 if sp.top_k == 0 else sp.top_k,
                seed=sample_seed(sp.sampling_seed, s),
                stop_token_ids=stop_ids(ctx, sp.stop_token_ids, f"{param}.stop_token_ids"),
                logprobs=top_ns[i] if want_lp else None,
                prompt_logprobs=top_ns[i] if start >= 0 else None,
                ignore_eos=bool(sp.ignore_eos),
            )
            rid = rids[i] if rids[i] is not None else f"{base}-{i}"
            if n > 1:
                rid = f"{rid}-{s}"
            specs.append(SubmitSpec(rid, ids, params))
            result = SequenceResult(len(items), ids, TextTracker(ctx.tokenizer, stops))
            items.append(_Item(rid, result, max_new, want_lp, start, top_ns[i]))
    streams = await submit(ctx, specs)
    results = [it.result for it in items]
    with_text = req.return_text_in_logprobs
    single = not is_batch and n == 1

    if not req.stream:
        await collect(request, streams, results)
        rendered = [_render(ctx, it, with_text) for it in items]
        return JSONResponse(rendered[0] if single else rendered)

    async def events() -> AsyncIterator[str]:
        async for i, out in live_outputs(streams, results):
            r = results[i]
            r.feed(out, streams[i])
            emitted = r.tracker.text[: r.tracker.emitted]
            yield sse({**_render(ctx, items[i], with_text, emitted), "index": i})

    return sse_response(streams, events())
