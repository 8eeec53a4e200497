"""Clients for live engines, one interface (see ``base.Adapter``), and the bundled engine launcher."""

from __future__ import annotations

from ..oracles.vocabulary import ENGINES
from .base import DISPATCH, INDEPENDENT, LIST, Adapter, AdapterError, Completion, GenParams, Progress


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
