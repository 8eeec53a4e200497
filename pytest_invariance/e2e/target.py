"""A live engine under test and how a batch is sent to it.

A batch goes as one request carrying all its prompts by default (``list`` dispatch: OpenAI
``prompt`` as a list, SGLang ``text`` as a list), so the prompts are co-batched by construction and
a busy machine cannot change what shared a step. ``independent`` dispatch (one connection per
request, arrivals staggered by 10-30 ms) mixes new prefills into running decodes, as real traffic
does. Where the engine reports per-step batch sizes (the bundled engine's ``/metrics``), each batch's
sizes go into the evidence, so an equal result says whether the requests ever shared a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pytest_invariance.adapters import Adapter, AdapterError, Completion, GenParams, Progress
from pytest_invariance.adapters.base import DISPATCH, INDEPENDENT, LIST

JITTER_MS = (10.0, 30.0)
PROMPT_KINDS = ("ids", "text")
EVIDENCE = ("logprobs", "tokens", "text")
COMPARED = {"logprobs": "token ids and logprob bits", "tokens": "token ids", "text": "text (UTF-8 bytes)"}
# A real server's probe: 129 tokens = one 128-token KV block (vLLM CPU's block size) + 1, so the
# probe's own prefill crosses a block boundary and its decode runs over a few hundred tokens of
# context. Measured on vLLM CPU 0.32 (tiny Llama, hidden 1024, bf16): logprob bits differed from
# concurrency 2 at step 4 with 129 tokens, at step 8 with 13; token ids stayed equal at every
# concurrency to 128 either way. The bundled engine shows its batch dependence at any length, so
# its short text probe stays the default there (and keeps ``make test`` as it was).
REAL_PROBE_TOKENS = 129


@dataclass(frozen=True)
class SweepOptions:
    """What the sweeps send and compare, per session (``--invariance-probe-tokens`` & co.).

    ``probe_tokens`` None: the short text probe; else a seeded prompt of that many tokens (token
    ids, or about that many words where ``prompts`` is ``text``). ``neighbour_tokens``: lengths of
    the neighbours in the needle/mixed/logprobs sweeps (None: the built-in mix, in characters).
    ``prefix_lengths``: the prefix sweep's shared-prefix lengths (None: from the reported block and
    chunk sizes). ``levels``: the concurrencies of the single and mixed sweeps (None: by profile; a
    padded engine's buckets need levels inside them, e.g. 5,8,9,16). ``prompts``: ``ids`` or
    ``text`` (for servers that refuse token ids).
    ``evidence``: ``logprobs`` (token ids and logprob bits), ``tokens`` (token ids only) or ``text``
    (the completion text's bytes), for servers that return no logprobs or no ids. ``replays``: K,
    the replay check's number of replays of its concurrent workload."""

    probe_tokens: int | None = None
    neighbour_tokens: tuple[int, ...] | None = None
    prefix_lengths: tuple[int, ...] | None = None
    levels: tuple[int, ...] | None = None  # concurrency levels of the single and mixed sweeps
    prompts: str = "ids"
    evidence: str = "logprobs"
    replays: int = 5  # how often the replay check sends its concurrent workload (--invariance-replays)

    def __post_init__(self) -> None:
        if self.prompts not in PROMPT_KINDS:
            raise ValueError(f"prompts must be one of {', '.join(PROMPT_KINDS)}, got {self.prompts!r}")
        if self.evidence not in EVIDENCE:
            raise ValueError(f"evidence must be one of {', '.join(EVIDENCE)}, got {self.evidence!r}")
        for name in ("neighbour_tokens", "prefix_lengths", "levels"):
            v = getattr(self, name)
            if v is not None and (not v or any(int(x) < 1 for x in v)):
                raise ValueError(f"{name} must be positive integers, got {v!r}")
        if self.levels is not None and len(set(self.levels)) < 2:
            raise ValueError(f"levels must hold at least two distinct concurrencies (one compares nothing), got {self.levels!r}")
        if self.replays < 2:
            raise ValueError(f"replays must be at least 2 (one replay compares nothing), got {self.replays!r}")
        if self.probe_tokens is not None and self.probe_tokens < 1:
            raise ValueError(f"probe_tokens must be a positive integer, got {self.probe_tokens!r}")

    @property
    def compared(self) -> str:
        return COMPARED[self.evidence]

    @property
    def logprobs(self) -> bool:
        return self.evidence == "logprobs"


def detect_evidence(adapter: Adapter, prompt: str = "The quick brown fox") -> str:
    """``logprobs`` when a one-token request with ``logprobs`` returns them, else ``tokens`` when the
    answer carries token ids, else ``text``: one request, recorded in the target's configuration."""
    try:
        c = adapter.generate_one(prompt, GenParams(max_tokens=1, logprobs=1))
        if c.logprobs is not None:
            return "logprobs"
    except AdapterError as exc:
        if "logprobs" not in exc.field:
            raise
        c = adapter.generate_one(prompt, GenParams(max_tokens=1))
    return "text" if c.extra.get("lossy_token_ids") else "tokens"
INFO_KEYS = (
    "engine", "version", "model", "mode", "batch_invariant", "enable_deterministic_inference", "dtype",
    "device", "device_name", "num_threads", "max_num_seqs", "chunk_size", "chunked_prefill_size",
    "page_size", "block_size", "enable_prefix_cache", "disable_radix_cache", "split_kv", "kernels",
    "unrouted", "fully_invariant_routing", "attention_backend", "sampling_backend", "tp_size", "collective",
    "gemm_strategy", "splitk_max_m", "split_kv_min_tokens", "batch_mechanisms", "cuda_graph_buckets",
    "cuda_graph_bs", "cudagraph_capture_sizes",
    "served_model_name", "model_path", "quantization", "max_model_len", "enforce_eager", "kv_cache_dtype",
    "enable_chunked_prefill", "cudagraph_mode", "compilation_mode", "cuda_graph", "max_running_requests",
    "max_prefill_tokens", "owned_by", "implementation", "version_source", "mode_source", "reported_mode",
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
    options: SweepOptions = field(default_factory=SweepOptions)
    started_here: bool = False  # the bundled engine this session started (never a --invariance-url)
    control_note: str | None = None  # what a designed control is, where it is not the target's twin

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
    def name(self) -> str:
        """Short name for progress lines and summaries: a server given by URL by its engine and host
        (``vllm@127.0.0.1:8000``; it has no mode of ours), the bundled engine started here by its mode."""
        if self.started_here:
            return f"{self.engine}[{self.mode or self.expected_mode}]"
        engine = (self.info or {}).get("implementation") or self.engine  # --invariance-implementation
        return f"{engine}@{urlsplit(self.url).netloc or self.url}"

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
        cfg = {k: self.info[k] for k in INFO_KEYS if self.info and k in self.info}
        return {**cfg, "evidence": self.options.evidence, "prompts": self.options.prompts}


def name_target(t: Target, implementation: str | None = None, version: str | None = None,
                mode: str | None = None) -> None:  # fmt: skip
    """Identity the server does not report, given on the command line and marked as given: the
    software's name, its version (where the server reports none), and the mode. A given mode wins
    for the target over what the server reports: vLLM reports its own ``VLLM_BATCH_INVARIANT``
    (off: ``default``) while ``pytest-invariance launch`` runs it under the reference kernels. The
    server's own report is kept as ``reported_mode``. The control is ``default`` unless it reports."""
    if not (implementation or version or mode):
        return
    info = dict(t.info or {})
    if implementation:
        info["implementation"] = implementation
    if version and not info.get("version"):
        info.update(version=version, version_source="--invariance-target-version")
    t.info = info
    t.mode = t.adapter.mode(info)
    if mode and (t.role == "target" or t.mode is None):
        given = mode if t.role == "target" else "default"
        if t.mode not in (None, given):
            info["reported_mode"] = t.mode
        info.update(mode=given, mode_source="--invariance-target-mode")
        t.mode = given


def engine_identity(t: Target) -> tuple:
    """What must match for a control to speak for the target: adapter flavour and served model
    (named by the answers where ``/v1/models`` fails, as on ``transformers serve``: a control
    connected before its first answer would otherwise differ from its target by a None)."""
    info = t.info or {}
    return (t.engine, info.get("model") or info.get("served_model_name") or getattr(t.adapter, "answered_model", None))


def dispatch_shape(t: Target) -> dict:
    """How a sweep's batches were sent and what it compared, for its record's shape."""
    how = {"compared": t.options.compared, "prompts": t.options.prompts}
    if t.dispatch == LIST:
        return {"dispatch": LIST, **how}
    return {"dispatch": INDEPENDENT, "jitter_ms": list(JITTER_MS), **how}


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
