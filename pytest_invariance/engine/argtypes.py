"""argparse types shared by ``serve`` and the pytest plugin: one wording for a bad number.

Here, not in the plugin, because the engine may import nothing of the plugin (docs/ARCHITECTURE.md)
while the plugin may import this small module (argparse only: no torch, no FastAPI).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive_int(name: str | None = None) -> Callable[[str], int]:
    """An integer >= 1; a bad value names the option ``name`` (argparse names it when None)."""
    what = f"{name} expects" if name else "expected"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{what} a positive integer, got {text!r}")
        return value

    return parse


def positive_seconds(name: str) -> Callable[[str], float]:
    """A finite number of seconds > 0; a bad value names the option ``name``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} expects a number of seconds, got {text!r}") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{name} expects a positive number of seconds, got {text!r}")
        return value

    return parse


def positive_int_list(name: str) -> Callable[[str], tuple[int, ...]]:
    """Comma-separated integers >= 1 (``1,2,4,8``); a bad value names the option ``name``."""
    one = positive_int(name)

    def parse(text: str) -> tuple[int, ...]:
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or any(not p for p in parts):
            raise argparse.ArgumentTypeError(f"{name} expects comma-separated positive integers, got {text!r}")
        return tuple(one(p) for p in parts)

    return parse
