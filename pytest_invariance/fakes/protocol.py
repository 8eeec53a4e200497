"""What the fakes' routes share: request parsing, the wait for a request's rows, errors."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

from .model import encode
from .scheduler import Row

MODEL_NAME = "fake-tiny"
_SAMPLING_KEYS = ("presence_penalty", "frequency_penalty", "repetition_penalty", "top_k", "min_p", "logit_bias")


class BadRequest(ValueError):
    """A request the fake cannot serve: answered 400 with the reason."""


def parse_prompts(value: Any) -> list[list[int]]:
    """OpenAI ``prompt``: a string, a list of strings, a list of ids, or a list of id lists."""
    if isinstance(value, str):
        return [encode(value)]
    if isinstance(value, list) and value and all(isinstance(x, int) for x in value):
        return [_ids(value)]
    if isinstance(value, list) and value and all(isinstance(x, (str, list)) for x in value):
        return [encode(x) if isinstance(x, str) else _ids(x) for x in value]
    raise BadRequest("prompt must be a string, a list of strings, a list of token ids or a list of those")


def _ids(ids: list) -> list[int]:
    if not ids or not all(isinstance(t, int) and 0 <= t < 256 for t in ids):
        raise BadRequest("token ids must be integers in 0..255 (the fake's byte vocabulary)")
    return list(ids)


def sampling(body: dict) -> bool:
    top_p = body.get("top_p")
    return (float(body.get("temperature") or 0) > 0 or (top_p is not None and float(top_p) < 1)
            or any(body.get(k) not in (None, 0, 0.0, 1.0, -1, {}) for k in _SAMPLING_KEYS))  # fmt: skip


def wait(rows: list[Row], deadline_s: float = 600.0) -> None:
    end = time.monotonic() + deadline_s
    for r in rows:
        while r.events.get(timeout=max(0.01, end - time.monotonic())) is not None:
            pass


def tokens(rows: list[Row]) -> Iterator[tuple[int, Row, int]]:
    """(row index, row, token index) as the step loop produces them, rows interleaved."""
    live = dict(enumerate(rows))
    while live:
        for i, r in list(live.items()):
            try:
                k = r.events.get(timeout=0.005)
            except queue.Empty:
                continue
            if k is None:
                del live[i]
            else:
                yield i, r, k
