"""The fakes' numeric model: a seeded float32 recurrence over a byte vocabulary.

Small enough to run a few thousand rows a second on one CPU core, yet its greedy tokens and
logprobs are real arithmetic: a perturbation of a row's state moves its logprob bits at once and,
a few steps later, often its token ids. Every row is computed alone at one fixed shape (a matrix-
vector product of the same size for every row), so the clean model is batch-invariant by
construction and the only batch dependence a fake has is the bug it plants.
"""

from __future__ import annotations

import numpy as np

VOCAB = 256  # token id = byte value; text prompts are their UTF-8 bytes
# Generated tokens are printable ASCII, so a completion's text carries its ids without loss (the
# softmax still runs over all 256 bytes, so every prompt byte has a finite logprob).
PRINTABLE = np.arange(32, 127)
_LO, _HI = 32, 127  # the same range as a slice (a view, no copy)
DIM = 32
PERTURB = np.float32(2.0**-9)  # relative size of a planted bug's change to a row's state


class TinyModel:
    """``state`` after a prompt, ``advance`` by one token, ``logprobs`` of the next token."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.embed = (rng.standard_normal((VOCAB, DIM)) * 0.8).astype(np.float32)
        self.mix = (rng.standard_normal((DIM, DIM)) * (0.9 / np.sqrt(DIM))).astype(np.float32)
        self.head = (rng.standard_normal((VOCAB, DIM)) * 1.5).astype(np.float32)
        self.direction = rng.standard_normal(DIM).astype(np.float32)  # where planted bugs push a row

    def start(self) -> np.ndarray:
        return np.zeros(DIM, dtype=np.float32)

    def advance(self, h: np.ndarray, token: int) -> np.ndarray:
        return np.tanh(self.mix @ h + self.embed[token]).astype(np.float32)

    def state(self, tokens: list[int], h: np.ndarray | None = None) -> np.ndarray:
        h = self.start() if h is None else h
        for t in tokens:
            h = self.advance(h, t)
        return h

    def logprobs(self, h: np.ndarray) -> np.ndarray:
        z = self.head @ h
        m = z.max()
        return z - (m + np.log(np.exp(z - m).sum()))

    def prompt_logprobs(self, tokens: list[int]) -> tuple[list[float | None], np.ndarray]:
        """Each prompt token's logprob given the tokens before it (the first has none), and the
        state after the whole prompt: the same arithmetic as decoding, so a rescoring is bitwise
        equal to the decode it rescores on a clean fake."""
        h = self.start()
        out: list[float | None] = [None]
        for i, t in enumerate(tokens):
            if i:
                out.append(float(self.logprobs(h)[t]))
            h = self.advance(h, t)
        return out, h

    def greedy(self, lp: np.ndarray) -> int:
        return _LO + int(np.argmax(lp[_LO:_HI]))

    def top(self, lp: np.ndarray, k: int) -> list[int]:
        """The ``k`` most likely printable tokens, ties broken by id."""
        if k <= 0:
            return []
        if k == 1:
            return [self.greedy(lp)]
        return [_LO + int(i) for i in np.argsort(-lp[_LO:_HI], kind="stable")[:k]]

    def perturbed(self, h: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """``h`` nudged along a fixed direction: a row computed by other arithmetic."""
        return (h + PERTURB * np.float32(scale) * self.direction).astype(np.float32)


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8")) or [32]


def decode(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")
