"""OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``.

Responses follow the OpenAI schema so the official client parses them, with vLLM-style extras
that make comparisons lossless: every choice carries ``token_ids`` and ``prompt_token_ids``
(always, not only with ``return_token_ids``), and ``prompt_logprobs`` when asked. Text fields are
lossy by nature (a lone byte of a multi-byte character decodes to U+FFFD); ids are not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .async_loop import SubmitSpec
from .protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIRequest,
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
    render_chat,
    resolve_max_tokens,
    sample_seed,
    sse,
    sse_response,
    stop_ids,
    submit,
)
from .server_text import TextTracker, token_bytes, token_text

UNSUPPORTED = {
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "logit_bias": {},
    "min_tokens": 0,
}


GREEDY_BELOW = 1e-5  # vLLM's rule: a temperature this small samples greedily


def _temperature(value: float | None) -> float:
    """OpenAI's default 1.0; below ``GREEDY_BELOW`` greedy, as vLLM does, since dividing logits by a
    subnormal temperature overflows to inf and the softmax to NaN (measured: token 0 every step)."""
    if value is None:
        return 1.0
    return 0.0 if value < GREEDY_BELOW else value


def _top_k(value: int | None) -> int | None:
    return -1 if value == 0 else value


def _params(
    ctx: ServerContext,
    req: OpenAIRequest,
    sample: int,
    max_tokens: int,
    logprobs: int | None,
    prompt_logprobs: int | None,
) -> Any:
    """The engine's sampling params for the ``sample``-th of a request's n samples: both routes
    read the shared fields alike and differ only in the token budget and the logprob counts."""
    return make_params(
        max_tokens=max_tokens,
        temperature=_temperature(req.temperature),
        top_p=req.top_p,
        top_k=_top_k(req.top_k),
        seed=sample_seed(req.seed, sample),
        stop_token_ids=stop_ids(ctx, req.stop_token_ids, "stop_token_ids"),
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        ignore_eos=req.ignore_eos,
    )


def _prompts(ctx: ServerContext, prompt: Any) -> list[list[int]]:
    """The OpenAI ``prompt`` union as a list of id lists."""
    if isinstance(prompt, str):
        return [encode_text(ctx, prompt, "prompt")]
    if not prompt:
        raise APIError("prompt is empty", param="prompt")
    if isinstance(prompt[0], int):
        return [check_token_ids(ctx, prompt, "prompt")]
    if isinstance(prompt[0], str):
        return [encode_text(ctx, p, f"prompt.{i}") for i, p in enumerate(prompt)]
    return [check_token_ids(ctx, p, f"prompt.{i}") for i, p in enumerate(prompt)]


def _usage(results: list[SequenceResult]) -> dict[str, Any]:
    seen: dict[int, int] = {}
    for r in results:  # prompt tokens counted once per prompt, as OpenAI does for n > 1
        seen[id(r.prompt_ids)] = len(r.prompt_ids)
    prompt = sum(seen.values())
    completion = sum(len(r.token_ids) for r in results)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    cached = [r.cached_tokens for r in results if r.cached_tokens is not None]
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": sum(cached)}
    return usage


def _stop_reason(r: SequenceResult) -> int | str | None:
    return r.matched if r.finish_reason == "stop" else None


def _envelope(
    ctx: ServerContext, cid: str, obj: str, model: str, choices: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    """The fields every completion object and chunk starts with, in OpenAI's order."""
    return {"id": cid, "object": obj, "created": ctx.created, "model": model, "choices": choices, **extra}


def _stream(
    ctx: ServerContext,
    stream_options: Any,
    streams: list[Any],
    results: list[SequenceResult],
    envelope: tuple[str, str, str],  # id, object, model
    choice: Callable[[SequenceResult, Any, Any], dict[str, Any]],
    opening: Sequence[tuple[list[dict[str, Any]], dict[str, Any]]] = (),
) -> Response:
    """The streaming tail both routes share: ``opening`` chunks, then one chunk per engine output
    (``choice`` feeds the output to its result and builds the route's choice), then a usage chunk
    when the client asked for one (``usage`` is then a key of every chunk, as OpenAI sends it)."""
    include_usage = bool(stream_options and stream_options.include_usage)

    def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None, **extra: Any) -> str:
        payload = _envelope(ctx, *envelope, choices, **extra)
        if include_usage:
            payload["usage"] = usage
        return sse(payload)

    async def events() -> AsyncIterator[str]:
        for choices, extra in opening:
            yield chunk(choices, **extra)
        async for i, out in live_outputs(streams, results):
            yield chunk([choice(results[i], out, streams[i])])
        if include_usage:
            yield chunk([], _usage(results))

    return sse_response(streams, events())


class _LegacyLogprobs:
    """Builds the completions ``logprobs`` object, optionally with ``token_id:N`` token names."""

    def __init__(self, ctx: ServerContext, as_ids: bool) -> None:
        self.ctx = ctx
        self.as_ids = as_ids

    def name(self, token_id: int) -> str:
        return f"token_id:{token_id}" if self.as_ids else token_text(self.ctx.tokenizer, token_id)

    def top(self, alternatives: list[tuple[int, float]]) -> dict[str, float | None]:
        """One position's ``{token: logprob}``. Keyed by text, two candidates that decode alike
        (bytes 0x80-0xFF alone are both U+FFFD) share a key: the higher logprob keeps it, so the
        greedy token never looks lower than an alternative. ``token_id:N`` keys lose nothing."""
        out: dict[str, float | None] = {}
        for t, lp in alternatives:  # best first
            out.setdefault(self.name(t), finite(lp))
        return out

    def build(
        self,
        ids: list[int],
        lps: list[float | None],
        tops: list[Any],
        offset0: int,
    ) -> dict[str, Any]:
        tokens = [self.name(t) for t in ids]
        offsets, pos = [], offset0
        for t in tokens:
            offsets.append(pos)
            pos += len(t) if not self.as_ids else 0
        top = [None if tp is None else self.top(tp) for tp in tops]
        return {
            "tokens": tokens,
            "token_logprobs": [finite(x) for x in lps],
            "top_logprobs": top,
            "text_offset": offsets,
        }


def _vllm_prompt_logprobs(ctx: ServerContext, r: SequenceResult) -> list[Any] | None:
    """vLLM's ``prompt_logprobs``: per position ``{id: {logprob, rank, decoded_token}}``, first null."""
    if r.prompt_logprobs is None:
        return None
    out: list[Any] = []
    tops = r.prompt_top_logprobs or []
    for pos, (tid, lp) in enumerate(zip(r.prompt_ids, r.prompt_logprobs, strict=False)):
        if lp is None:
            out.append(None)
            continue
        entry: dict[str, Any] = {}
        alternatives = tops[pos] if pos < len(tops) and tops[pos] else []
        for rank, (alt, alp) in enumerate(alternatives, start=1):
            entry[str(alt)] = {
                "logprob": finite(alp),
                "rank": rank,
                "decoded_token": token_text(ctx.tokenizer, alt),
            }
        if str(tid) not in entry:
            entry[str(tid)] = {
                "logprob": finite(lp),
                "rank": None,
                "decoded_token": token_text(ctx.tokenizer, tid),
            }
        out.append(entry)
    return out


# ---------------------------------------------------------------------------------------------
# /v1/completions


async def completions(ctx: ServerContext, request: Request, body: Any) -> Response:
    """``POST /v1/completions``."""
    req: CompletionRequest = validate(CompletionRequest, body)
    reject_unsupported(req, {**UNSUPPORTED, "suffix": ""})
    if req.best_of is not None and req.best_of != req.n:
        raise APIError("best_of other than n is not supported", param="best_of")
    if req.stream_options is not None and not req.stream:
        raise APIError("stream_options is only allowed with stream: true", param="stream_options")
    prompts = _prompts(ctx, req.prompt)
    check_n(ctx, req.n, len(prompts))
    stops = normalize_stop(req.stop)
    prompt_lp = req.prompt_logprobs
    if prompt_lp is None and req.echo and req.logprobs is not None:
        prompt_lp = req.logprobs
    cid = new_id("cmpl")
    specs, results = [], []
    for p_idx, ids in enumerate(prompts):
        max_tokens = resolve_max_tokens(ctx, len(ids), req.max_tokens, 16, "max_tokens")
        for s in range(req.n):
            index = p_idx * req.n + s
            params = _params(ctx, req, s, max_tokens, req.logprobs, prompt_lp)
            specs.append(SubmitSpec(f"{cid}-{index}", ids, params))
            results.append(SequenceResult(index, ids, TextTracker(ctx.tokenizer, stops)))
    model = req.model or ctx.model_name
    streams = await submit(ctx, specs)
    legacy = _LegacyLogprobs(ctx, req.return_tokens_as_token_ids)

    if not req.stream:
        await collect(request, streams, results)
        choices = []
        for r in results:
            prompt_text = ctx.tokenizer.decode(r.prompt_ids) if req.echo else ""
            logprobs = None
            if req.logprobs is not None:
                ids, lps, tops = list(r.token_ids), list(r.logprobs), list(r.top_logprobs)
                if req.echo and r.prompt_logprobs is not None:
                    ptops = r.prompt_top_logprobs or [None] * len(r.prompt_ids)
                    ids, lps, tops = r.prompt_ids + ids, list(r.prompt_logprobs) + lps, list(ptops) + tops
                logprobs = legacy.build(ids, lps, tops, 0)
            choice: dict[str, Any] = {
                "index": r.index,
                "text": prompt_text + r.text,
                "logprobs": logprobs,
                "finish_reason": r.finish_reason,
                "stop_reason": _stop_reason(r),
                "token_ids": r.token_ids,
                "prompt_token_ids": r.prompt_ids,
            }
            if req.prompt_logprobs is not None:
                choice["prompt_logprobs"] = _vllm_prompt_logprobs(ctx, r)
            choices.append(choice)
        return JSONResponse(_envelope(ctx, cid, "text_completion", model, choices, usage=_usage(results)))

    started: set[int] = set()

    def choice(r: SequenceResult, out: Any, stream: Any) -> dict[str, Any]:
        head_text = ""
        head: dict[str, Any] = {}
        if r.index not in started:
            started.add(r.index)
            head = {"prompt_token_ids": r.prompt_ids}
            if req.echo:
                head_text = ctx.tokenizer.decode(r.prompt_ids)
            if req.prompt_logprobs is not None:
                r.prompt_logprobs = out.prompt_logprobs
                r.prompt_top_logprobs = getattr(out, "prompt_top_logprobs", None)
                head["prompt_logprobs"] = _vllm_prompt_logprobs(ctx, r)
        n_before = len(r.token_ids)
        delta, new = r.feed(out, stream)
        logprobs = None
        if req.logprobs is not None and new:
            logprobs = legacy.build(
                r.token_ids[n_before:], r.logprobs[n_before:], r.top_logprobs[n_before:], 0
            )
        return {
            "index": r.index,
            "text": head_text + delta,
            "logprobs": logprobs,
            "finish_reason": r.finish_reason,
            "stop_reason": _stop_reason(r) if r.done else None,
            "token_ids": r.token_ids[n_before:],
            **head,
        }

    return _stream(ctx, req.stream_options, streams, results, (cid, "text_completion", model), choice)


# ---------------------------------------------------------------------------------------------
# /v1/chat/completions


def _chat_logprob_entry(
    ctx: ServerContext, token_id: int, lp: float | None, top: list[Any], as_ids: bool = False
) -> dict[str, Any]:
    """A ``logprobs.content`` entry; ``as_ids`` names tokens ``token_id:N`` (``bytes`` stay the token's)."""
    tok = ctx.tokenizer

    def name(t: int) -> str:
        return f"token_id:{t}" if as_ids else token_text(tok, t)

    return {
        "token": name(token_id),
        "bytes": token_bytes(tok, token_id),
        "logprob": finite(lp),
        "top_logprobs": [
            {"token": name(t), "bytes": token_bytes(tok, t), "logprob": finite(alp)} for t, alp in top
        ],
    }


async def chat_completions(ctx: ServerContext, request: Request, body: Any) -> Response:
    """``POST /v1/chat/completions`` with the plain-text template of ``render_chat``."""
    req: ChatCompletionRequest = validate(ChatCompletionRequest, body)
    reject_unsupported(req, UNSUPPORTED)
    if req.tools:
        raise APIError("tools are not supported by the bundled engine", param="tools")
    if req.top_logprobs is not None and not req.logprobs:
        raise APIError("top_logprobs requires logprobs: true", param="top_logprobs")
    if req.stream_options is not None and not req.stream:
        raise APIError("stream_options is only allowed with stream: true", param="stream_options")
    check_n(ctx, req.n, 1)
    stops = normalize_stop(req.stop)
    prompt_text = render_chat(req.messages, req.add_generation_prompt)
    ids = encode_text(ctx, prompt_text, "messages")
    param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    max_tokens = resolve_max_tokens(ctx, len(ids), requested, None, param)
    k = (req.top_logprobs or 0) if req.logprobs else None
    cid = new_id("chatcmpl")
    specs, results = [], []
    for s in range(req.n):
        params = _params(ctx, req, s, max_tokens, k, req.prompt_logprobs)
        specs.append(SubmitSpec(f"{cid}-{s}", ids, params))
        results.append(SequenceResult(s, ids, TextTracker(ctx.tokenizer, stops)))
    model = req.model or ctx.model_name
    streams = await submit(ctx, specs)

    if not req.stream:
        await collect(request, streams, results)
        choices = []
        for r in results:
            logprobs = None
            if k is not None:
                logprobs = {
                    "content": [
                        _chat_logprob_entry(ctx, t, lp, top, req.return_tokens_as_token_ids)
                        for t, lp, top in zip(r.token_ids, r.logprobs, r.top_logprobs, strict=True)
                    ]
                }
            choices.append(
                {
                    "index": r.index,
                    "message": {"role": "assistant", "content": r.text},
                    "logprobs": logprobs,
                    "finish_reason": r.finish_reason,
                    "stop_reason": _stop_reason(r),
                    "token_ids": r.token_ids,
                }
            )
        payload = _envelope(
            ctx, cid, "chat.completion", model, choices, usage=_usage(results), prompt_token_ids=ids
        )
        if req.prompt_logprobs is not None:
            payload["prompt_logprobs"] = _vllm_prompt_logprobs(ctx, results[0])
        return JSONResponse(payload)

    opening = [
        ([{"index": r.index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
           "finish_reason": None}], {"prompt_token_ids": ids if r.index == 0 else None})
        for r in results
    ]  # fmt: skip

    def choice(r: SequenceResult, out: Any, stream: Any) -> dict[str, Any]:
        n_before = len(r.token_ids)
        delta, new = r.feed(out, stream)
        logprobs = None
        if k is not None and new:
            logprobs = {
                "content": [
                    _chat_logprob_entry(ctx, t, lp, top, req.return_tokens_as_token_ids)
                    for t, lp, top in zip(
                        r.token_ids[n_before:], r.logprobs[n_before:], r.top_logprobs[n_before:], strict=True
                    )
                ]
            }
        return {
            "index": r.index,
            "delta": {"content": delta} if delta or not r.done else {},
            "logprobs": logprobs,
            "finish_reason": r.finish_reason,
            "stop_reason": _stop_reason(r) if r.done else None,
            "token_ids": r.token_ids[n_before:],
        }

    return _stream(ctx, req.stream_options, streams, results,
                   (cid, "chat.completion.chunk", model), choice, opening)  # fmt: skip
