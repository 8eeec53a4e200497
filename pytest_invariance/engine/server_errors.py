"""How the bundled server answers what went wrong: OpenAI-style error bodies, one per failure kind.

Bad input is a 400, a missing key a 401, an oversized body a 413, a full queue a 503 with
``Retry-After`` (jittered ``retry-after-ms``), a dead engine a 503, anything else a 500 that is
logged and counted; never a traceback on the wire.
"""

from __future__ import annotations

import hmac
import logging
import math
import random

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .async_loop import EngineDead, Overloaded
from .metrics import Metrics
from .protocol import APIError

log = logging.getLogger("pytest_invariance.engine.server")
UNAUTHENTICATED_PATHS = frozenset({"/health"})


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


class AuthMiddleware:
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
            await error_response(err)(scope, receive, send)
            return
        await self.app(scope, receive, send)



def install_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    """Every failure kind as its OpenAI-style error response (counted in ``metrics``)."""

    @app.exception_handler(APIError)
    async def _apierror_response(_req: Request, exc: APIError) -> JSONResponse:
        if exc.status >= 400:
            metrics.count_request(f"error_{exc.status}")
        return error_response(exc)

    @app.exception_handler(Overloaded)
    async def _overloaded(_req: Request, exc: Overloaded) -> JSONResponse:
        # Retry-After is whole seconds; retry-after-ms (honoured by the openai client) is jittered
        # upward only: the wait is already each client's own slot in the drain (AsyncEngine
        # ._retry_after), and a client back early would only be rejected again.
        secs = max(1, math.ceil(exc.retry_after_s))
        jittered_ms = exc.retry_after_s * 1000 * random.uniform(1.0, 1.25)
        headers = {"Retry-After": str(secs), "retry-after-ms": str(max(1, int(jittered_ms)))}
        return error_response(
            APIError(str(exc), status=503, type="server_overloaded", code="overloaded", headers=headers)
        )

    @app.exception_handler(EngineDead)
    async def _dead(_req: Request, exc: EngineDead) -> JSONResponse:
        return error_response(APIError(str(exc), status=503, type="server_error", code="engine_dead"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return error_response(
            APIError(str(exc.detail), status=exc.status_code, type=kind, headers=dict(exc.headers or {}))
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(APIError(f"invalid request: {exc.errors()[:1]}"))

    @app.exception_handler(Exception)
    async def _internal(_req: Request, exc: Exception) -> JSONResponse:
        # The exception goes to the log, never onto the wire; the connection is closed with the
        # answer (announced, so a keep-alive client does not send its next request into a reset).
        log.exception("internal error")
        metrics.count_request("error_500")
        err = APIError("internal error (logged by the server)", status=500, type="server_error",
                       headers={"Connection": "close"})  # fmt: skip
        return error_response(err)
