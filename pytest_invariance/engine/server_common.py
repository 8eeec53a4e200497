"""What the OpenAI and SGLang routes share: limits, prompt checks, sampling params, collection.

A request is validated completely here, before anything reaches the engine, so that bad input is
a 400 naming the field rather than an engine exception; the engine's own ``ValueError`` is still
caught and turned into a 400 as a second line of defence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from .async_loop import AsyncEngine, RequestStream, SubmitSpec
from .protocol import APIError
from .server_text import TextTracker

# Chat template for tokenizers that carry none (the byte tokenizer): each message is
# "<|role|>\n{content}\n", and the generation prompt is "<|assistant|>\n". Plain text, so it
# tokenizes identically with any tokenizer, and the model sees role changes as explicit markers.
CHAT_ROLE_OPEN = "<|{role}|>\n"
CHAT_MESSAGE_END = "\n"

# JSON has no -Infinity: a token the sampler could never pick gets vLLM's placeholder logprob.
NEG_INF_LOGPROB = -9999.0
DISCONNECT_POLL_S = 0.5


@dataclass
class ServerContext:
    """Everything a route needs: the engine bridge, its tokenizer, and the server's limits."""

    engine: AsyncEngine
    tokenizer: Any
    engine_config: Any
    model_name: str
    max_model_len: int
    vocab_size: int
    max_n: int
    max_prompts: int
    created: int = field(default_factory=lambda: int(time.time()))


def new_id(prefix: str) -> str:
    """A unique id (``cmpl-...``, ``chatcmpl-...``)."""
    return f"{prefix}-{uuid.uuid4().hex}"


def finite(x: float | None) -> float | None:
    """A logprob that JSON can carry: -inf becomes -9999.0, NaN becomes null."""
    if x is None:
        return None
    x = float(x)
    if math.isfinite(x):
        return x
    if x == -math.inf:
        return NEG_INF_LOGPROB
    return None


def render_chat(messages: list[Any], add_generation_prompt: bool) -> str:
    """Apply the documented plain-text chat template (see ``CHAT_ROLE_OPEN``)."""
    parts = [CHAT_ROLE_OPEN.format(role=m.role) + m.text() + CHAT_MESSAGE_END for m in messages]
    if add_generation_prompt:
        parts.append(CHAT_ROLE_OPEN.format(role="assistant"))
    return "".join(parts)


def check_token_ids(ctx: ServerContext, ids: list[int], param: str) -> list[int]:
    """A prompt of ids: non-empty, every id in the model's vocabulary, shorter than the context."""
    if not ids:
        raise APIError("prompt is empty", param=param)
    bad = next((t for t in ids if not 0 <= t < ctx.vocab_size), None)
    if bad is not None:
        raise APIError(f"token id {bad} is outside the vocabulary [0, {ctx.vocab_size})", param=param)
    if len(ids) >= ctx.max_model_len:
        raise APIError(
            f"prompt has {len(ids)} tokens; the context is {ctx.max_model_len} tokens", param=param
        )
    return list(ids)


MAX_STOP_TOKEN_IDS = 256  # each is checked per generated token on the engine thread


def stop_ids(ctx: ServerContext, ids: list[int] | None, param: str) -> tuple[int, ...]:
    """``stop_token_ids`` as the engine takes them: at most ``MAX_STOP_TOKEN_IDS``, each in the
    vocabulary (an id the model cannot produce is a mistake, not a no-op)."""
    ids = list(ids or ())
    if len(ids) > MAX_STOP_TOKEN_IDS:
        raise APIError(f"at most {MAX_STOP_TOKEN_IDS} stop token ids, got {len(ids)}", param=param)
    bad = next((t for t in ids if not 0 <= t < ctx.vocab_size), None)
    if bad is not None:
        raise APIError(f"token id {bad} is outside the vocabulary [0, {ctx.vocab_size})", param=param)
    return tuple(ids)


def encode_text(ctx: ServerContext, text: str, param: str) -> list[int]:
    """Tokenize a text prompt; empty text (or text that tokenizes to nothing) is refused."""
    if text == "":
        raise APIError("prompt is empty", param=param)
    return check_token_ids(ctx, ctx.tokenizer.encode(text), param)


def resolve_max_tokens(
    ctx: ServerContext, prompt_len: int, requested: int | None, default: int | None, param: str
) -> int:
    """Explicit max_tokens beyond the context is a 400; a default is clamped to what fits."""
    room = ctx.max_model_len - prompt_len
    if requested is None:
        return room if default is None else max(1, min(default, room))
    if requested > room:
        raise APIError(
            f"{param}={requested} plus the prompt's {prompt_len} tokens exceeds the context of "
            f"{ctx.max_model_len} tokens",
            param=param,
        )
    return requested


def check_n(ctx: ServerContext, n: int, num_prompts: int, param: str = "n") -> None:
    """Cap the fan-out of one request (n per prompt, prompts per request)."""
    if n > ctx.max_n:
        raise APIError(f"n={n} is above this server's cap of {ctx.max_n}", param=param)
    if num_prompts > ctx.max_prompts:
        raise APIError(f"{num_prompts} prompts in one request; the cap is {ctx.max_prompts}", param="prompt")
    if num_prompts * n > ctx.engine.capacity:
        raise APIError(
            f"request expands to {num_prompts * n} sequences; this server admits {ctx.engine.capacity} at once",
            param=param,
        )


def sample_seed(seed: int | None, index: int) -> int | None:
    """Seed of the ``index``-th of n samples: sample 0 keeps the request's seed, so ``n=1`` and
    ``n=k`` agree on their first sample; the others get distinct seeds mixed from (seed, index)."""
    if seed is None or index == 0:
        return seed
    mixed = (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9) & (2**63 - 1)
    return mixed


def make_params(**kwargs: Any) -> Any:
    """``SamplingParams`` from the keyword arguments that were actually given."""
    from .sampler import SamplingParams

    return SamplingParams(**{k: v for k, v in kwargs.items() if v is not None})


@dataclass
class SequenceResult:
    """One generated sequence as the routes render it."""

    index: int
    prompt_ids: list[int]
    tracker: TextTracker
    logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    prompt_logprobs: list[float | None] | None = None
    prompt_top_logprobs: list[Any] | None = None
    finish_reason: str | None = None
    matched: int | str | None = None
    cached_tokens: int | None = None

    @property
    def token_ids(self) -> list[int]:
        return self.tracker.ids

    @property
    def text(self) -> str:
        return self.tracker.text

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def feed(self, out: Any, stream: RequestStream) -> tuple[str, int]:
        """Take one ``StepOutput``; returns (text delta, number of new tokens)."""
        if out.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = list(out.prompt_logprobs)
            self.prompt_top_logprobs = list(getattr(out, "prompt_top_logprobs", None) or [])
        if getattr(out, "cached_tokens", None) is not None:
            self.cached_tokens = int(out.cached_tokens)
        delta, new = "", 0
        if out.token_id is not None and out.finish_reason != "abort":
            new = 1
            self.logprobs.append(out.logprob)
            self.top_logprobs.append(list(out.top_logprobs or []))
            delta, stop = self.tracker.add(int(out.token_id))
            if stop is not None:
                self.finish_reason, self.matched = "stop", stop
                stream.abort("finished")
                return delta, new
        if out.finished:
            self.finish_reason = out.finish_reason or "stop"
            if self.finish_reason == "stop" and self.token_ids and self.matched is None:
                self.matched = self.token_ids[-1]  # EOS or a stop token id ended it
            delta += self.tracker.finish()
        return delta, new


async def submit(ctx: ServerContext, specs: list[SubmitSpec]) -> list[RequestStream]:
    """Admit the sequences; the engine's ValueError for bad input becomes a 400."""
    try:
        return await ctx.engine.submit(specs)
    except ValueError as e:
        raise APIError(str(e), param="prompt") from None


async def merged(streams: list[RequestStream]) -> AsyncIterator[tuple[int, Any]]:
    """Interleave the outputs of several streams as (stream index, StepOutput) in arrival order."""
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    done_marker = object()

    async def pump(i: int, s: RequestStream) -> None:
        try:
            async for out in s:
                await queue.put((i, out))
        except BaseException as e:  # noqa: BLE001 - forwarded to the consumer
            await queue.put((i, e))
            return
        await queue.put((i, done_marker))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    remaining = len(streams)
    try:
        while remaining:
            i, item = await queue.get()
            if item is done_marker:
                remaining -= 1
                continue
            if isinstance(item, BaseException):
                raise item
            yield i, item
    finally:
        for t in tasks:
            t.cancel()
        for s in streams:
            s.abort()


async def live_outputs(
    streams: list[RequestStream], results: list[SequenceResult]
) -> AsyncIterator[tuple[int, Any]]:
    """``merged``, less the outputs that arrive after their result ended (a stop string ends a
    result while its stream may still hold queued outputs)."""
    async for i, out in merged(streams):
        if not results[i].done:
            yield i, out


async def collect(
    request: Request, streams: list[RequestStream], results: list[SequenceResult]
) -> list[SequenceResult]:
    """Run every stream to its end and fill ``results`` (non-streaming responses); a client that
    goes away first cancels the work (see ``until_disconnect``)."""

    async def fill() -> list[SequenceResult]:
        async for i, out in live_outputs(streams, results):
            results[i].feed(out, streams[i])
        return results

    return await until_disconnect(request, fill())


async def until_disconnect(request: Request, work: Awaitable[Any]) -> Any:
    """Await ``work``; if the client goes away first, cancel it (which aborts its requests)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                raise APIError("client disconnected", status=499, code="client_closed")
    finally:
        if not task.done():
            task.cancel()


def sse(payload: Any) -> str:
    """One server-sent event."""
    if isinstance(payload, str):
        return f"data: {payload}\n\n"
    return f"data: {json.dumps(payload, separators=(',', ':'), allow_nan=False)}\n\n"


def sse_error(err: BaseException) -> str:
    """An error inside an SSE stream (status 200 is already sent)."""
    if isinstance(err, APIError):
        return sse(err.body())
    return sse({"error": {"message": str(err), "type": "server_error", "param": None, "code": None}})


def sse_response(streams: list[RequestStream], body: AsyncIterator[str]) -> StreamingResponse:
    """An SSE response around ``body``'s events, ended the same way on every route.

    The 200 status is sent before the first event, so an error can only be reported in-band;
    the engine requests are aborted however the stream ends (client gone included), and
    ``[DONE]`` comes last.
    """

    async def events() -> AsyncIterator[str]:
        try:
            async with contextlib.aclosing(body):
                async for event in body:
                    yield event
        except Exception as e:  # noqa: BLE001 - reported in-band: the 200 status is already sent
            yield sse_error(e)
        finally:
            for s in streams:
                s.abort()
        yield sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")
