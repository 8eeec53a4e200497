"""Command-line value parsers shared by the plugin's options and ``pytest-invariance serve``."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive_seconds(name: str) -> Callable[[str], float]:
    """A parser of a finite number of seconds > 0; a bad value names the option ``name``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} expects a number of seconds, got {text!r}") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{name} expects a positive number of seconds, got {text!r}")
        return value

    return parse
