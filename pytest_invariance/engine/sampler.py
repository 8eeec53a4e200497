"""Token selection: greedy with lowest-index ties, or seeded sampling keyed by (seed, position).

Each row is decided from its own fp32 logits and, when sampling, from a uniform drawn by a
counter-based hash of (seed, position): nothing depends on the other rows of the batch. The
`shared_rng` control instead draws from one engine-wide torch generator in batch order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .weights import splitmix64


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    logprobs: int | None = None  # top alternatives to return; 0 = only the chosen token's logprob
    prompt_logprobs: int | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        self.stop_token_ids = tuple(self.stop_token_ids)
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"{name} must be >= 0, got {v}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def greedy_pick(logits: torch.Tensor) -> torch.Tensor:
    """Row-wise argmax over fp32 logits, the lowest index among equal maxima (explicit, not by API luck)."""
    mx = logits.amax(dim=-1, keepdim=True)
    idx = torch.arange(logits.shape[-1], device=logits.device).expand_as(logits)
    return torch.where(logits == mx, idx, logits.shape[-1]).amin(dim=-1)


def counter_uniform01(seed: int, position: int) -> float:
    """Uniform in [0, 1) with 53 bits, a pure function of (seed, position)."""
    key = splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    with np.errstate(over="ignore"):
        bits = splitmix64(key ^ np.array([position], dtype=np.uint64) * np.uint64(0xD1B54A32D192ED03))
    return float(bits[0] >> np.uint64(11)) * 2.0**-53


def sample_row(logits: torch.Tensor, params: SamplingParams, u: float) -> int:
    """Inverse-CDF draw from softmax(logits / T) after top-k and top-p, in float64, one row."""
    x = logits.double() / params.temperature
    probs = torch.softmax(x, dim=-1)
    order = torch.sort(probs, descending=True, stable=True).indices  # ties: lower index first
    p = probs[order]
    if params.top_k > 0:
        p = p[: params.top_k]
        order = order[: params.top_k]
    if params.top_p < 1.0:
        csum = torch.cumsum(p, 0)
        keep = int((csum < params.top_p).sum().item()) + 1
        p, order = p[:keep], order[:keep]
    csum = torch.cumsum(p, 0)
    j = int((csum <= u * csum[-1]).sum().item())
    return int(order[min(j, len(order) - 1)].item())


class Sampler:
    """Picks the next token of every row; `shared_gen` set means the shared-RNG control is on."""

    def __init__(self, shared_gen: torch.Generator | None = None):
        self.shared_gen = shared_gen

    def __call__(
        self, logits: torch.Tensor, params: list[SamplingParams], seeds: list[int], positions: list[int]
    ) -> list[int]:
        out = greedy_pick(logits).tolist()
        for r, p in enumerate(params):
            if p.greedy:
                continue
            if self.shared_gen is not None:
                u = float(torch.rand((), generator=self.shared_gen, dtype=torch.float64))
            else:
                u = counter_uniform01(seeds[r], positions[r])
            out[r] = sample_row(logits[r], p, u)
        return out


def top_logprobs(logprobs: torch.Tensor, n: int) -> list[list[tuple[int, float]]]:
    """Top-n (token, logprob) per row, ties to the lower token id."""
    if n <= 0:
        return [[] for _ in range(logprobs.shape[0])]
    vals, idx = torch.sort(logprobs, dim=-1, descending=True, stable=True)
    ids, lps = idx[:, :n].tolist(), vals[:, :n].tolist()  # one transfer each for all rows
    return [list(zip(i, v, strict=True)) for i, v in zip(ids, lps, strict=True)]
