"""A request's state inside the engine: tokens, progress through its prompt, KV blocks, output."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from .sampler import SamplingParams


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """One request. `num_computed` tokens have K/V in the cache; the rest still need a forward."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: int  # insertion order: the scheduler never reorders by anything else
    seed: int  # effective sampling seed (the request's, or one derived from arrival)
    token_ids: list[int] = field(default_factory=list)
    num_computed: int = 0
    num_cached_prefix: int = 0  # tokens taken from the prefix cache at admission
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)  # chained hashes of full blocks
    status: Status = Status.WAITING
    finish_reason: str | None = None
    prompt_logprobs: list[float | None] | None = None
    prompt_top_logprobs: list[list[tuple[int, float]] | None] | None = None
    prompt_logprobs_sent: bool = False

    def __post_init__(self) -> None:
        if not self.token_ids:
            self.token_ids = list(self.prompt_ids)
        if self.params.prompt_logprobs is not None:
            self.prompt_logprobs = [None]
            self.prompt_top_logprobs = [None]

    @property
    def num_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt :]

    @property
    def remaining(self) -> int:
        """Tokens still to run through the model before the next sample."""
        return self.num_tokens - self.num_computed

    @property
    def in_prefill(self) -> bool:
        return self.remaining > 1 or self.num_computed == 0

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED
