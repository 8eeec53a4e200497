"""The bundled engine's HTTP server, ``python -m pytest_invariance.engine.server``.

The parts: ``server_app`` (the FastAPI app), ``server_routes`` (routes), ``server_errors`` (error
answers, auth), ``server_thread`` (in-process serving) and ``server_cli`` (``pytest-invariance
serve``); this module is the entry point and the names clients import.
"""

from __future__ import annotations

import sys

from .server_app import create_app
from .server_cli import build_parser, engine_config_from_args, serve, serve_main
from .server_thread import ServerThread

__all__ = ["ServerThread", "build_parser", "create_app", "engine_config_from_args", "serve", "serve_main"]

if __name__ == "__main__":
    sys.exit(serve_main())
