"""Greedy completions of a probe prompt alone and inside batches of N: how many unique ones.

What a user finally asks of "no culprit": is the probe's greedy completion the same whatever
shares its batch? It is generated alone, then at each (batch size, position) among neighbours
that are other prompts of its length (no padding: padding changes the probe's key count, which is
another question). A Hugging Face model generates through its own ``generate`` (greedy, KV cache:
one prefill, then one-token decode steps, the serving path); any other model through a greedy loop
over ``call(model, ids) -> logits[B, T, V]`` (the whole sequence recomputed per token).

Completions are counted unique by token ids and, under the bitwise contract, by token ids plus
the bits of every step's logits: a change that flips no greedy token is still a batch-dependent
computation, and on a small random model, whose top-2 margins are wide, it is what shows (the
planted split-K mutant on the tests' tiny Llama changes logits bits at batch 8 and 64 and no token
in 16).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from pytest_invariance.oracles import sequences as S

from .run import _positions, batch_of

Generate = Callable[[Any, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class Greedy:
    """The probe's completion alone and at every configuration (``"alone"``, ``"8@0"``...)."""

    completions: dict[str, list[int]]
    unique: int  # by token ids
    unique_bitwise: int  # by token ids and every step's logits bits
    first_divergence: int | None  # first differing token index over all pairs (token ids)
    differing: list[str]  # configurations whose tokens or logits bits differ from the probe alone
    new_tokens: int
    seconds: float

    @property
    def diverged(self) -> bool:
        return self.unique_bitwise > 1

    def describe(self) -> str:
        """``6 greedy completions of 8 tokens: 1 unique (token ids), 1 unique (token ids + logits bits)``."""
        text = (f"{len(self.completions)} greedy completions of {self.new_tokens} tokens: {self.unique} unique "
                f"(token ids), {self.unique_bitwise} unique (token ids + logits bits)")  # fmt: skip
        if self.first_divergence is not None:
            text += f", first token divergence at {self.first_divergence}"
        if self.differing:
            text += f"; differing from alone: {', '.join(self.differing)}"
        return text

    def evidence(self) -> dict[str, Any]:
        return {"samples": len(self.completions), "unique": self.unique, "unique_bitwise": self.unique_bitwise,
                "first_divergence": self.first_divergence, "differing": self.differing,
                "new_tokens": self.new_tokens, "completions": self.completions, "seconds": round(self.seconds, 3)}  # fmt: skip


def hf_greedy(model: Any, ids: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens[B, n], logits[B, n, V])`` of a Hugging Face causal LM's greedy ``generate``: exactly
    ``new_tokens`` tokens (EOS held off, so every row decodes every step)."""
    cfg = getattr(model, "generation_config", None)
    pad = getattr(cfg, "pad_token_id", None)
    pad = pad if pad is not None else getattr(cfg, "eos_token_id", None)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False, num_beams=1, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=pad if isinstance(pad, int) else 0)  # fmt: skip
    return out.sequences[:, ids.shape[1] :], torch.stack(list(out.logits), 1)


def loop_greedy(call: Callable[[Any, torch.Tensor], torch.Tensor]) -> Generate:
    """A greedy loop over ``call(model, ids) -> logits[B, T, V]`` (lowest index on a tie)."""

    def generate(model: Any, ids: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        steps = []
        with torch.no_grad():
            for _ in range(new_tokens):
                last = call(model, ids)[:, -1]
                steps.append(last)
                ids = torch.cat([ids, last.argmax(-1, keepdim=True)], 1)
        return ids[:, ids.shape[1] - new_tokens :], torch.stack(steps, 1)

    return generate


def _bits(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()).hexdigest()


def greedy_completions(
    model: Any,
    probe: torch.Tensor,
    neighbours: torch.Tensor,
    *,
    batch_sizes: Sequence[int] = (1, 8, 64),
    positions: str | Sequence[int] = "ends",
    new_tokens: int = 8,
    generate: Generate | None = None,
) -> Greedy:
    """The probe's (token ids ``[T]``) greedy completion alone and inside batches of ``neighbours``
    (``[K, T]``, the first n-1 of them in a batch of n) at each position; ``generate`` defaults to
    :func:`hf_greedy`. Batch size 1 runs the probe alone again (run-to-run first)."""
    gen = generate or hf_greedy
    t0 = time.perf_counter()
    out: dict[str, tuple[list[int], str]] = {}
    with torch.no_grad():
        toks, logits = gen(model, probe[None], new_tokens)
        out["alone"] = (toks[0].tolist(), _bits(logits[0]))
        for n in sorted(set(batch_sizes)):
            for p in _positions(n, positions):
                toks, logits = gen(model, batch_of(probe, neighbours, n, p), new_tokens)
                out[f"{n}@{p}"] = (toks[p].tolist(), _bits(logits[p]))
    seqs = [ids for ids, _ in out.values()]
    unique, _ = S.unique_completions(seqs)
    hist = S.divergence_histogram(seqs)
    return Greedy(
        completions={k: ids for k, (ids, _) in out.items()}, unique=unique,
        unique_bitwise=len({(tuple(ids), bits) for ids, bits in out.values()}),
        first_divergence=min(hist) if hist else None,
        differing=[k for k, v in out.items() if k != "alone" and v != out["alone"]],
        new_tokens=new_tokens, seconds=time.perf_counter() - t0,
    )  # fmt: skip
