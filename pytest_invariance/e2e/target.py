"""A live engine under test and how a batch is sent to it.

A batch goes as one request carrying all its prompts by default (``list`` dispatch: OpenAI
``prompt`` as a list, SGLang ``text`` as a list), so the prompts are co-batched by construction and
a busy machine cannot change what shared a step. ``independent`` dispatch (one connection per
request, arrivals staggered by 10-30 ms) mixes new prefills into running decodes, as real traffic
does. Where the engine reports per-step batch sizes (the bundled engine's ``/metrics``), each batch's
sizes go into the evidence, so an equal result says whether the requests ever shared a step.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_invariance.adapters import Adapter, Completion, GenParams, Progress
from pytest_invariance.adapters.base import DISPATCH, INDEPENDENT, LIST

JITTER_MS = (10.0, 30.0)
INFO_KEYS = (
    "engine", "version", "model", "mode", "batch_invariant", "enable_deterministic_inference", "dtype",
    "device", "device_name", "num_threads", "max_num_seqs", "chunk_size", "chunked_prefill_size",
    "page_size", "block_size", "enable_prefix_cache", "disable_radix_cache", "split_kv", "kernels",
    "unrouted", "fully_invariant_routing", "attention_backend", "sampling_backend", "tp_size", "collective",
    "gemm_strategy", "splitk_max_m", "split_kv_min_tokens", "batch_mechanisms",
)  # fmt: skip


@dataclass
class Target:
    """A live engine plus what it reported about itself."""

    adapter: Adapter
    role: str  # "target" (expected invariant) | "control" (expected default: invariance off)
    expected_mode: str
    info: dict | None = None
    mode: str | None = None
    log_path: str | None = None
    dispatch: str = LIST  # how a batch is sent: one list request, or independent jittered requests

    def __post_init__(self) -> None:
        if self.dispatch not in DISPATCH:
            raise ValueError(f"dispatch must be one of {', '.join(DISPATCH)}, got {self.dispatch!r}")

    @property
    def engine(self) -> str:
        return self.adapter.engine

    @property
    def url(self) -> str:
        return self.adapter.base_url

    @property
    def label(self) -> str:
        return f"{self.engine} [{self.mode or 'mode unknown'}] @ {self.url}"

    def refresh(self) -> None:
        self.info = self.adapter.server_info()
        self.mode = self.adapter.mode(self.info)

    def mode_check(self) -> str | None:
        """A one-line flag when the reported mode contradicts the role (None: consistent or unknown)."""
        if self.mode is not None and self.mode != self.expected_mode:
            return (f"{self.url} is used as the {self.role} (expected mode {self.expected_mode}) but its "
                    f"/server_info reports mode {self.mode}")  # fmt: skip
        return None

    def config(self) -> dict:
        return {k: self.info[k] for k in INFO_KEYS if self.info and k in self.info}


def engine_identity(t: Target) -> tuple:
    """What must match for a control to speak for the target: adapter flavour and served model."""
    info = t.info or {}
    return (t.engine, info.get("model") or info.get("served_model_name"))


def dispatch_shape(t: Target) -> dict:
    """How a sweep's batches were sent, for its record's shape."""
    if t.dispatch == LIST:
        return {"dispatch": LIST}
    return {"dispatch": INDEPENDENT, "jitter_ms": list(JITTER_MS)}


def send(
    t: Target,
    prompts: list,
    params: GenParams,
    seed: int,
    bar: Progress | None = None,
    batches: dict[str, dict[int, int]] | None = None,
    key: str | None = None,
) -> list[Completion]:
    """One batch of prompts on ``t`` in its dispatch mode; with ``batches`` and ``key``, the engine
    steps this batch ran, by batch size (from the engine's metrics, where it reports them)."""
    before = t.adapter.step_batch_sizes() if batches is not None else None
    if t.dispatch == LIST:
        out = t.adapter.generate(prompts, params, dispatch=LIST, progress=bar)
    else:
        out = t.adapter.generate(prompts, params, jitter_ms=JITTER_MS, seed=seed, progress=bar)
    if batches is not None and before is not None:
        after = t.adapter.step_batch_sizes() or {}
        delta = {bs: n - before.get(bs, 0) for bs, n in sorted(after.items()) if n > before.get(bs, 0)}
        batches[key or str(len(prompts))] = delta
    return out


def co_batching(batches: dict[str, dict[int, int]]) -> dict:
    """Evidence from per-level step batch sizes: the sizes seen and the largest step of each level."""
    if not batches:
        return {}
    return {"step_batch_sizes": {k: {str(bs): n for bs, n in v.items()} for k, v in batches.items()},
            "max_step_batch": {k: max(v, default=0) for k, v in batches.items()}}  # fmt: skip
