"""The bundled server's routes: generation (OpenAI and SGLang bodies) and the side routes a
sweep reads (health, version, models, server info, model info, cache flush, metrics)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from .. import __version__
from .async_loop import AsyncEngine
from .metrics import Metrics
from .protocol import APIError, parse_json_body
from .server_common import ServerContext
from .server_generate import generate
from .server_openai import chat_completions, completions

MAX_BODY_BYTES = 16 * 1024 * 1024
Handler = Callable[[ServerContext, Request, Any], Awaitable[Response]]


async def read_json(request: Request) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise APIError(f"request body over {MAX_BODY_BYTES} bytes", status=413, param="body")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise APIError(f"request body over {MAX_BODY_BYTES} bytes", status=413, param="body")
    return parse_json_body(bytes(raw))



def add_generation_routes(app: FastAPI, ctx: ServerContext) -> None:
    """``/v1/completions``, ``/v1/chat/completions`` and ``/generate``: bounded JSON body in, handler out."""

    def json_route(path: str, handler: Handler, methods: tuple[str, ...] = ("POST",)) -> None:
        async def endpoint(request: Request) -> Response:
            body = await read_json(request)
            return await handler(ctx, request, body)

        endpoint.__name__ = handler.__name__
        app.add_api_route(path, endpoint, methods=list(methods), include_in_schema=False)

    json_route("/v1/completions", completions)
    json_route("/v1/chat/completions", chat_completions)
    json_route("/generate", generate, ("POST", "PUT"))



def add_info_routes(app: FastAPI, ctx: ServerContext, bridge: AsyncEngine, metrics: Metrics, settings: dict) -> None:
    """What a client reads about the server: health, version, models, configuration, metrics."""
    cfg = ctx.engine_config

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> Response:
        return Response(status_code=200 if bridge.alive else 503)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": __version__}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": ctx.model_name,
            "object": "model",
            "created": ctx.created,
            "owned_by": "pytest-invariance",
            "root": ctx.model_name,
            "parent": None,
            "max_model_len": ctx.max_model_len,
        }
        return {"object": "list", "data": [card]}

    async def server_info() -> dict[str, Any]:
        info = await bridge.call(lambda e: e.info())
        snap = metrics.snapshot()
        return {
            "version": __version__,
            "model_path": cfg.model_path,
            "served_model_name": ctx.model_name,
            "enable_deterministic_inference": bool(cfg.batch_invariant),
            "disable_radix_cache": not cfg.enable_prefix_cache,
            "chunked_prefill_size": cfg.chunk_size,
            "page_size": cfg.block_size,
            "max_running_requests": cfg.max_num_seqs,
            "max_model_len": ctx.max_model_len,
            **settings,
            **info,
            "metrics": snap,
            "kv_blocks": {k: snap[f"kv_blocks_{k}"] for k in ("free", "used", "total")},
        }

    app.add_api_route("/server_info", server_info, methods=["GET"], include_in_schema=False)
    app.add_api_route("/get_server_info", server_info, methods=["GET"], include_in_schema=False)

    async def model_info() -> dict[str, Any]:
        return {
            "model_path": cfg.model_path or ctx.model_name,
            "tokenizer_path": cfg.tokenizer_path or getattr(ctx.tokenizer, "name", None),
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
        }

    app.add_api_route("/model_info", model_info, methods=["GET"], include_in_schema=False)
    app.add_api_route("/get_model_info", model_info, methods=["GET"], include_in_schema=False)

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache(request: Request) -> Response:
        raw = request.query_params.get("timeout", "0")
        try:
            timeout = float(raw)
            if not 0 <= timeout <= 3600:
                raise ValueError
        except ValueError:
            raise APIError("timeout must be a number of seconds in [0, 3600]", param="timeout") from None
        deadline = time.monotonic() + timeout
        while bridge.inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if bridge.inflight:
            raise APIError(
                f"cache not flushed: {bridge.inflight} requests are running or waiting",
                param="timeout",
                code="busy",
            )
        if not await bridge.call(lambda e: e.flush_cache()):
            raise APIError("cache not flushed: the engine refused (busy)", code="busy")
        return PlainTextResponse("Cache flushed.\n")

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
