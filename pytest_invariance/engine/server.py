"""The bundled engine's HTTP server: FastAPI app factory and the ``serve`` command.

Routes: OpenAI ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``; SGLang ``/generate``,
``/flush_cache``, ``/server_info`` (alias ``/get_server_info``), ``/model_info`` (alias
``/get_model_info``); ``/health``, ``/version`` and ``/metrics`` (Prometheus text).

Safety: binds 127.0.0.1 unless told otherwise; with ``api_key`` every route but ``/health``
needs ``Authorization: Bearer <key>``; no route takes a path or reads a file (the model is loaded
once, from the command line). Bad input is a 400 with an OpenAI-style error body, a full queue a
503 with ``Retry-After``.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import math
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import __version__
from .async_loop import AsyncEngine, EngineDead, Overloaded
from .metrics import Metrics
from .protocol import APIError, parse_json_body
from .server_common import ServerContext
from .server_generate import generate
from .server_openai import chat_completions, completions

log = logging.getLogger("pytest_invariance.engine.server")

DEFAULT_MAX_QUEUE = 256
DEFAULT_MAX_N = 16
DEFAULT_MAX_PROMPTS = 256
MAX_BODY_BYTES = 16 * 1024 * 1024
UNAUTHENTICATED_PATHS = frozenset({"/health"})


def _error(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


class _AuthMiddleware:
    """Bearer-token check on every route except ``/health`` (pure ASGI: streaming stays intact)."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in UNAUTHENTICATED_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if not hmac.compare_digest(given, self.expected):
            err = APIError(
                "missing or invalid API key (send 'Authorization: Bearer <key>')",
                status=401,
                param=None,
                code="invalid_api_key",
            )
            await _error(err)(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _read_json(request: Request) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise APIError(f"request body over {MAX_BODY_BYTES} bytes", status=413, param="body")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise APIError(f"request body over {MAX_BODY_BYTES} bytes", status=413, param="body")
    return parse_json_body(bytes(raw))


Handler = Callable[[ServerContext, Request, Any], Awaitable[Response]]


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
        app.add_middleware(_AuthMiddleware, api_key=api_key)

    @app.exception_handler(APIError)
    async def _api_error(_req: Request, exc: APIError) -> JSONResponse:
        if exc.status >= 400:
            metrics.count_request(f"error_{exc.status}")
        return _error(exc)

    @app.exception_handler(Overloaded)
    async def _overloaded(_req: Request, exc: Overloaded) -> JSONResponse:
        # Retry-After is whole seconds; retry-after-ms (honoured by the openai client) is jittered
        # so that a burst of rejected clients does not come back as one synchronized wave.
        secs = max(1, math.ceil(exc.retry_after_s))
        jittered_ms = exc.retry_after_s * 1000 * random.uniform(0.5, 1.5)
        headers = {"Retry-After": str(secs), "retry-after-ms": str(max(1, int(jittered_ms)))}
        return _error(
            APIError(str(exc), status=503, type="server_overloaded", code="overloaded", headers=headers)
        )

    @app.exception_handler(EngineDead)
    async def _dead(_req: Request, exc: EngineDead) -> JSONResponse:
        return _error(APIError(str(exc), status=503, type="server_error", code="engine_dead"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return _error(
            APIError(str(exc.detail), status=exc.status_code, type=kind, headers=dict(exc.headers or {}))
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(APIError(f"invalid request: {exc.errors()[:1]}"))

    @app.exception_handler(Exception)
    async def _internal(_req: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error")
        metrics.count_request("error_500")
        return _error(APIError(f"internal error: {exc!r}", status=500, type="server_error"))

    def json_route(path: str, handler: Handler, methods: tuple[str, ...] = ("POST",)) -> None:
        async def endpoint(request: Request) -> Response:
            body = await _read_json(request)
            return await handler(ctx, request, body)

        endpoint.__name__ = handler.__name__
        app.add_api_route(path, endpoint, methods=list(methods), include_in_schema=False)

    json_route("/v1/completions", completions)
    json_route("/v1/chat/completions", chat_completions)
    json_route("/generate", generate, ("POST", "PUT"))

    @app.get("/health")
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
            "metrics": metrics.snapshot(),
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

    return app


class ServerThread:
    """Serve an app from a background thread on a free loopback port (tests, in-process sweeps).

    ``with ServerThread(app) as base_url: ...`` blocks until the server accepts connections and
    stops it (lifespan shutdown included) on exit.
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 60.0):
        import uvicorn

        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        self._timeout = startup_timeout_s
        self._thread: threading.Thread | None = None
        self.base_url = ""

    def __enter__(self) -> str:
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server thread failed to start")
            time.sleep(0.01)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.base_url = f"http://{host}:{port}"
        return self.base_url

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)


# -------------------------------------------------------------------------------------------------
# `pytest-invariance serve`


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise _ArgError(message)


def _positive(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value

    return parse


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be an integer, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in [0, 65535], got {value}")
    return value


DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
          "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """Flags of ``pytest-invariance serve``."""
    from .config import GEMM_STRATEGIES, PRESETS

    p = _Parser(prog="pytest-invariance serve", description="Serve the bundled engine over HTTP.")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=_port, default=8000)
    p.add_argument("--batch-invariant", action="store_true", help="route every kernel to reference_kernels")
    p.add_argument("--preset", choices=sorted(PRESETS), default="demo",
                   help="synthetic model shape (default demo; llama3-8b for a GPU)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="model dtype (default: the model's)")
    p.add_argument("--max-num-seqs", type=_positive("--max-num-seqs"), default=64)
    p.add_argument("--chunk-size", type=_positive("--chunk-size"), default=None)
    p.add_argument("--prefix-cache", action="store_true", help="enable the prefix cache (a positive control)")
    p.add_argument(
        "--shared-rng", action="store_true", help="one engine-wide RNG stream (a positive control)"
    )
    p.add_argument("--gemm-strategy", choices=GEMM_STRATEGIES, default="m-bucket",
                   help="default-mode GEMMs: m-bucket (split-K with fp32 partials at M <= --splitk-max-m, "
                   "one pass above; a positive control) or one-pass (the stock GEMM only)")  # fmt: skip
    p.add_argument("--splitk-max-m", type=_positive("--splitk-max-m"), default=8,
                   help="largest step (token rows) that takes split-K under m-bucket (default 8)")  # fmt: skip
    p.add_argument("--split-kv", choices=("auto", "none", "fixed"), default="auto",
                   help="default-mode decode attention: auto (split count from batch and cores; a positive "
                   "control), none (one pass) or fixed (splits of a fixed length)")  # fmt: skip
    p.add_argument("--prefix-attention", choices=("cascade", "one-pass"), default="cascade",
                   help="default-mode attention of a prefill chunk with a cached or earlier-chunk prefix: "
                   "cascade (two LSE-merged partial softmaxes; a positive control) or one-pass (SDPA)")  # fmt: skip
    p.add_argument(
        "--model", default=None, metavar="PATH", help="local Hugging Face dir (config.json + safetensors)"
    )
    p.add_argument(
        "--api-key", default=None, help="require 'Authorization: Bearer KEY' on every route but /health"
    )
    p.add_argument(
        "--max-queue", type=int, default=DEFAULT_MAX_QUEUE, help="admitted requests beyond max-num-seqs"
    )
    p.add_argument("--max-n", type=_positive("--max-n"), default=DEFAULT_MAX_N)
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return p


def engine_config_from_args(args: argparse.Namespace) -> Any:
    """An ``EngineConfig`` from parsed flags; ValueError/OSError for anything unusable."""
    import os

    from .config import PRESETS, EngineConfig, ModelConfig

    if args.device != "cpu" and not (args.device == "cuda" or args.device.startswith("cuda:")):
        raise ValueError(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"--device {args.device}: CUDA is not available")
    model = PRESETS[args.preset]()
    if args.model is not None:
        if not os.path.isfile(os.path.join(args.model, "config.json")):
            raise ValueError(f"--model {args.model!r}: no config.json in that directory")
        model = ModelConfig.from_hf_dir(args.model)
    if args.dtype:
        model.dtype = DTYPES[args.dtype]
    if args.max_queue < 0:
        raise ValueError(f"--max-queue must be >= 0, got {args.max_queue}")
    kwargs: dict[str, Any] = {
        "model": model,
        "model_path": args.model,
        "device": args.device,
        "batch_invariant": args.batch_invariant,
        "max_num_seqs": args.max_num_seqs,
        "enable_prefix_cache": args.prefix_cache,
        "shared_rng": args.shared_rng,
        "gemm_strategy": args.gemm_strategy,
        "splitk_max_m": args.splitk_max_m,
        "split_kv": args.split_kv,
        "prefix_attention": args.prefix_attention,
    }
    defaults = EngineConfig()
    kwargs["max_num_batched_tokens"] = max(defaults.max_num_batched_tokens, args.max_num_seqs)
    if args.chunk_size is not None:
        kwargs["chunk_size"] = args.chunk_size
    return EngineConfig(**kwargs)


def serve_main(argv: list[str] | None = None) -> int:
    """``pytest-invariance serve [flags]``: returns the exit status; bad flags are one line on stderr."""
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    except _ArgError as e:
        print(f"pytest-invariance serve: error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = engine_config_from_args(args)
        app = create_app(config, api_key=args.api_key, max_queue=args.max_queue, max_n=args.max_n)
    except (ValueError, OSError, KeyError, json.JSONDecodeError) as e:
        print(f"pytest-invariance serve: error: {e}", file=sys.stderr)
        return 2
    import uvicorn

    uconfig = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    server = uvicorn.Server(uconfig)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    except (OSError, SystemExit) as e:  # uvicorn exits on a port it cannot bind
        print(
            f"pytest-invariance serve: error: cannot serve on {args.host}:{args.port} ({e})", file=sys.stderr
        )
        return 1
    return 0 if server.started else 1


def serve(argv: list[str] | None = None) -> int:
    """Alias of :func:`serve_main`."""
    return serve_main(argv)


if __name__ == "__main__":
    sys.exit(serve_main())
