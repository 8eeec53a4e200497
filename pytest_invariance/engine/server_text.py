"""Incremental detokenization and stop strings for the HTTP server.

Stop strings are matched on decoded text, not on tokens: a stop string can span token boundaries
(always, with the byte tokenizer). When one matches, the server aborts the engine request and cuts
the text before the match; the token ids keep everything that was generated, so the harness can
still compare ids exactly.

Streaming must never emit text it may later take back, so two tails are held back until more
tokens arrive: an incomplete UTF-8 sequence (decoded as U+FFFD) and a suffix that could be the
start of a stop string.
"""

from __future__ import annotations

from typing import Any

REPLACEMENT = "\ufffd"


class TextTracker:
    """Decoded text of one generated sequence, with stop-string detection."""

    def __init__(self, tokenizer: Any, stops: list[str]) -> None:
        self._tok = tokenizer
        self._stops = stops
        self._max_stop = max((len(s) for s in stops), default=0)
        self.ids: list[int] = []
        self.text = ""  # final text (cut at a stop string) once finished
        self.emitted = 0  # characters already handed out as deltas
        self.matched: str | None = None

    def add(self, token_id: int) -> tuple[str, str | None]:
        """Append a token; returns (text delta safe to emit, the stop string if one matched)."""
        self.ids.append(token_id)
        full = self._tok.decode(self.ids)
        if self._stops:
            # Search the whole text: decoded lengths shrink when bytes complete a character.
            hit = self._find_stop(full, 0)
            if hit is not None:
                idx, stop = hit
                self.text = full[:idx]
                self.matched = stop
                return self._take(len(self.text)), stop
        self.text = full
        return self._take(self._safe_end(full)), None

    def finish(self) -> str:
        """The rest of the text once the sequence has ended."""
        return self._take(len(self.text))

    def _find_stop(self, text: str, start: int) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for stop in self._stops:
            idx = text.find(stop, start)
            if idx >= 0 and (best is None or idx < best[0]):
                best = (idx, stop)
        return best

    def _safe_end(self, text: str) -> int:
        end = len(text)
        while end > self.emitted and text[end - 1] == REPLACEMENT:
            end -= 1  # possibly an incomplete multi-byte character
        for k in range(min(self._max_stop - 1, end - self.emitted), 0, -1):
            tail = text[end - k : end]
            if any(s.startswith(tail) for s in self._stops):
                return end - k
        return end

    def _take(self, end: int) -> str:
        if end <= self.emitted:
            return ""
        delta = self.text[self.emitted : end]
        self.emitted = end
        return delta


def token_text(tokenizer: Any, token_id: int) -> str:
    """One token decoded on its own (lossy for partial UTF-8; ids travel separately)."""
    return tokenizer.decode([token_id])


def token_bytes(tokenizer: Any, token_id: int) -> list[int]:
    """The token's bytes: exact for the byte tokenizer, UTF-8 of its text otherwise."""
    if getattr(tokenizer, "name", None) == "bytes":
        return [token_id] if 0 <= token_id < 256 else []
    return list(token_text(tokenizer, token_id).encode("utf-8"))
