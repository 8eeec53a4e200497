"""The bundled engine's FastAPI app: one engine, its async bridge, error handlers and routes.

Routes: OpenAI ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``; SGLang ``/generate``,
``/flush_cache``, ``/server_info`` (alias ``/get_server_info``), ``/model_info`` (alias
``/get_model_info``); ``/health``, ``/version`` and ``/metrics`` (Prometheus text).

Safety: binds 127.0.0.1 unless told otherwise; with ``api_key`` every route but ``/health``
needs ``Authorization: Bearer <key>``; no route takes a path or reads a file (the model is loaded
once, from the command line). Bad input is a 400 with an OpenAI-style error body, a full queue a
503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from .. import __version__
from .async_loop import AsyncEngine
from .metrics import Metrics
from .server_common import ServerContext
from .server_errors import AuthMiddleware, install_error_handlers
from .server_limits import DEFAULT_MAX_N, DEFAULT_MAX_PROMPTS, DEFAULT_MAX_QUEUE
from .server_routes import add_generation_routes, add_info_routes


def create_app(
    engine_config: Any,
    api_key: str | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    max_n: int = DEFAULT_MAX_N,
    *,
    max_prompts: int = DEFAULT_MAX_PROMPTS,
    retry_after_s: float = 1.0,
    engine: Any = None,
) -> FastAPI:
    """Build the app around a new ``LLMEngine(engine_config)`` (or a given one).

    The engine is built here, before the server binds, so a bad model fails the command rather
    than the first request. Its thread starts with the app's lifespan.
    """
    if max_queue < 0 or max_n < 1 or max_prompts < 1:
        raise ValueError("max_queue must be >= 0, max_n and max_prompts >= 1")
    if engine is None:
        from .engine import LLMEngine

        engine = LLMEngine(engine_config)
    cfg = engine.config
    mcfg = engine.model.cfg
    metrics = Metrics()
    bridge = AsyncEngine(
        engine,
        max_running=cfg.max_num_seqs,
        max_queue=max_queue,
        metrics=metrics,
        retry_after_s=retry_after_s,
    )
    ctx = ServerContext(
        engine=bridge,
        tokenizer=engine.tokenizer,
        engine_config=cfg,
        model_name=mcfg.name,
        max_model_len=mcfg.max_position,
        vocab_size=mcfg.vocab_size,
        max_n=max_n,
        max_prompts=max_prompts,
    )
    settings = {
        "max_queue": max_queue,
        "max_n": max_n,
        "max_prompts": max_prompts,
        "auth": api_key is not None,
    }

    @asynccontextmanager
    async def lifespan(_app: FastAPI):  # noqa: ANN202 - FastAPI's lifespan protocol
        bridge.start()
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, bridge.shutdown)

    app = FastAPI(title="pytest-invariance bundled engine", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)  # fmt: skip
    app.state.ctx = ctx
    if api_key is not None:
        app.add_middleware(AuthMiddleware, api_key=api_key)

    install_error_handlers(app, metrics)
    add_generation_routes(app, ctx)
    add_info_routes(app, ctx, bridge, metrics, settings)
    return app
