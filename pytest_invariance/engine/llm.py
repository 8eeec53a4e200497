"""Offline API: `LLM(**config).generate(prompts, params)` on the same engine loop as the server."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from .config import EngineConfig, ModelConfig, demo_model
from .engine import LLMEngine, StepOutput
from .sampler import SamplingParams


@dataclass
class Completion:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    prompt_logprobs: list[float | None] | None = None
    prompt_top_logprobs: list | None = None
    finish_reason: str | None = None
    max_batch_size: int = 0  # largest step batch seen while this request ran


class LLM:
    """Keyword arguments are EngineConfig fields; `model` may also be a dict of ModelConfig fields."""

    def __init__(self, **kwargs):
        names = {f.name for f in fields(EngineConfig)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"unknown engine options: {unknown}")
        model = kwargs.pop("model", None)
        if isinstance(model, dict):
            model = ModelConfig(**model)
        self.engine = LLMEngine(EngineConfig(model=model or demo_model(), **kwargs))
        self.tokenizer = self.engine.tokenizer
        self._n = 0

    def info(self) -> dict:
        return self.engine.info()

    def generate(
        self, prompts: list[str | list[int]], params: SamplingParams | list[SamplingParams] | None = None
    ) -> list[Completion]:
        """All prompts are queued first, so they are admitted and batched together."""
        params = params or SamplingParams()
        plist = params if isinstance(params, list) else [params] * len(prompts)
        comps: dict[str, Completion] = {}
        order: list[str] = []
        for prompt, p in zip(prompts, plist, strict=True):
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            rid = f"llm-{self._n}"
            self._n += 1
            self.engine.add_request(rid, ids, p)
            comps[rid] = Completion(rid, ids)
            order.append(rid)
        while self.engine.has_unfinished():
            outs = self.engine.step()
            bsz = self.engine.last_step_stats["batch_size"]
            for c in comps.values():
                if c.finish_reason is None:
                    c.max_batch_size = max(c.max_batch_size, bsz)
            for o in outs:
                self._apply(comps.get(o.request_id), o)
        for c in comps.values():
            c.text = self.tokenizer.decode(c.token_ids)
        return [comps[r] for r in order]

    @staticmethod
    def _apply(c: Completion | None, o: StepOutput) -> None:
        if c is None:
            return
        if o.prompt_logprobs is not None:
            c.prompt_logprobs = o.prompt_logprobs
            c.prompt_top_logprobs = o.prompt_top_logprobs
        if o.token_id >= 0:
            c.token_ids.append(o.token_id)
            c.logprobs.append(o.logprob)
            c.top_logprobs.append(o.top_logprobs)
        if o.finished:
            c.finish_reason = o.finish_reason
