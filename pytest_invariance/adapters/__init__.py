"""Clients for live engines, one interface (see ``base.Adapter``), and the bundled engine launcher."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..oracles.vocabulary import ENGINES

if TYPE_CHECKING:
    from .base import Adapter

_FROM_BASE = ("DISPATCH", "INDEPENDENT", "LIST", "Adapter", "AdapterError", "Completion", "GenParams", "Progress")


def __getattr__(name: str):
    """The client interface loads (with ``requests``) on first use, so the plugin can install the
    light ``progress`` sink at start-up without paying for it."""
    if name in _FROM_BASE:
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_adapter(engine: str, base_url: str, **kw) -> Adapter:
    """The adapter for ``--invariance-engine`` (default ``openai`` for an unknown server)."""
    if engine == "bundled":
        from .bundled import BundledAdapter as cls
    elif engine == "vllm":
        from .vllm import VLLMAdapter as cls
    elif engine == "sglang":
        from .sglang import SGLangAdapter as cls
    elif engine == "openai":
        from .openai import OpenAIAdapter as cls
    else:
        raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    return cls(base_url, **kw)


__all__ = ["Adapter", "AdapterError", "Completion", "GenParams", "Progress", "DISPATCH", "INDEPENDENT",
           "LIST", "ENGINES", "make_adapter"]  # fmt: skip
