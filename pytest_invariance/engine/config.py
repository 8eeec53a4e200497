"""Engine and model configuration.

Every knob that can change a request's numerics lives here, so `LLMEngine.info()` can report all of
them and a recorded run can be reproduced from its `server_info`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .speculative import SpecConfig, parse_speculative

# Byte-level vocabulary: 256 byte values plus these specials.
BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
BYTE_VOCAB_SIZE = 259
# The demo's ids: the byte vocabulary, then reserved ids up to GPT-2's 50257 padded to a multiple of
# 64. Drivers written for real tokenizers send random ids in that range (SGLang's radix-cache test
# draws from [100, 50000]); a reserved id is a valid prompt token that the model never emits.
DEMO_VOCAB_SIZE = 50304
DEMO_CONTEXT = 8192
GEMM_STRATEGIES = ("m-bucket", "one-pass")


@dataclass
class ModelConfig:
    """Shape of a Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU, optional MoE MLPs).

    The field defaults are the demo model's width; ``demo_model()`` is the demo model itself.
    """

    name: str = "bundled-demo"
    vocab_size: int = BYTE_VOCAB_SIZE
    # LM-head rows (0: vocab_size). Ids at or above are reserved: accepted in prompts, never scored
    # (logit -inf, so never sampled), as a real model's untrained reserved tokens; their synthetic
    # embedding rows are generated when a prompt uses them (see weights.synthetic_rows).
    scored_vocab: int = 0
    hidden: int = 1024
    layers: int = 2
    heads: int = 16
    kv_heads: int = 4
    head_dim: int = 64
    intermediate: int = 2816
    rope_theta: float = 10000.0
    max_position: int = 2048
    rms_eps: float = 1e-5
    dtype: str = "bfloat16"
    n_experts: int = 0
    top_k: int = 2
    moe_intermediate: int = 0  # 0: same as `intermediate`
    moe_every: int = 1  # every n-th layer is MoE when n_experts > 0
    tie_embeddings: bool = False
    attention_bias: bool = False  # Qwen2-style q/k/v bias
    seed: int = 0
    weight_scale: float = 1.0  # multiplies the synthetic init std (1/sqrt(fan_in))
    lm_head_shared: float = 0.0  # synthetic LM head: a shared row direction, in logit stds (see weights)
    bos_token_id: int | None = BOS_ID
    eos_token_id: int | None = EOS_ID

    def __post_init__(self) -> None:
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even for RoPE")
        if self.n_experts and not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k must be in [1, n_experts], got {self.top_k}")
        if not 0 <= self.scored_vocab <= self.vocab_size:
            raise ValueError(f"scored_vocab must be in [0, vocab_size={self.vocab_size}], got {self.scored_vocab}")
        if self.scored_vocab and self.tie_embeddings:
            raise ValueError("scored_vocab needs an untied LM head")

    @property
    def output_vocab(self) -> int:
        """Rows of the LM head: the ids the model can emit."""
        return self.scored_vocab or self.vocab_size

    @property
    def expert_intermediate(self) -> int:
        return self.moe_intermediate or self.intermediate

    def is_moe_layer(self, layer: int) -> bool:
        return self.n_experts > 0 and layer % self.moe_every == self.moe_every - 1

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_hf_dir(cls, path: str | os.PathLike) -> ModelConfig:
        """Read a Hugging Face `config.json` (Llama / Qwen2 / Mixtral / Qwen2-MoE field names)."""
        cfg = json.loads((Path(path) / "config.json").read_text())
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        arch = " ".join(cfg.get("architectures") or [])
        n_experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
        eos = cfg.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        dtype = str(cfg.get("torch_dtype") or "bfloat16").replace("torch.", "")
        return cls(
            name=Path(path).resolve().name,
            vocab_size=int(cfg["vocab_size"]),
            hidden=hidden,
            layers=int(cfg["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate=int(cfg["intermediate_size"]),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            max_position=int(cfg.get("max_position_embeddings", 2048)),
            rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            dtype=dtype if dtype in ("bfloat16", "float16", "float32") else "bfloat16",
            n_experts=n_experts,
            top_k=int(cfg.get("num_experts_per_tok") or 2) if n_experts else 2,
            moe_intermediate=int(cfg.get("moe_intermediate_size") or 0),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", "Qwen2" in arch)),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_id=eos,
        )


@dataclass
class EngineConfig:
    """Engine knobs. The ones marked *control* break invariance on purpose in default mode."""

    model: ModelConfig = field(default_factory=lambda: demo_model())
    model_path: str | None = None  # local Hugging Face dir (config.json + *.safetensors)
    tokenizer_path: str | None = None  # dir or tokenizer.json; default: model_path, else bytes
    device: str = "cpu"
    batch_invariant: bool = False
    max_num_seqs: int = 64  # control: max running batch
    max_num_batched_tokens: int = 512  # token budget of one step (prefill chunks are cut by it)
    chunk_size: int = 256  # control: longest prefill chunk of one sequence in one step
    block_size: int = 16
    num_blocks: int = 0  # 0: enough for max_num_seqs full-length sequences, capped by memory
    enable_prefix_cache: bool = False  # control
    # Default-mode GEMM strategy (control): "m-bucket" runs split-K with fp32 partials for steps of
    # at most `splitk_max_m` token rows and one pass above, as cuBLAS heuristics and CUTLASS M-bucket
    # dispatch do; "one-pass" always calls the stock GEMM (batch dependence then is the BLAS's own).
    gemm_strategy: str = "m-bucket"
    splitk_max_m: int = 8
    splitk_parts: int = 4
    split_kv: str = "auto"  # decode attention: "auto" (count from batch and cores), "none", or "fixed"
    split_kv_size: int = 256  # tokens per split when split_kv="fixed" (invariant policy)
    split_kv_min_tokens: int = 16  # "auto": no split shorter than this (the demo's contexts reach 2 splits)
    prefix_attention: str = "cascade"  # control: "cascade" (LSE-merged prefix + chunk) or "one-pass" (SDPA)
    # Decode steps through CUDA graphs (engine/decode_graphs.py): "auto" captures on CUDA at
    # tensor_parallel 1 for dense models (the MoE expert loops read routing on the host, which a
    # capture cannot hold) and runs eager elsewhere, "on" requires it (CPU: the same static-buffer
    # replay without a capture, for tests), "off" is eager (vLLM's --enforce-eager).
    cuda_graphs: str = "auto"
    # Batch sizes a decode step is padded up to (the capture ladder). Empty: vLLM's default ladder
    # (1, 2, 4, 8, 16, 24, ...) when graphs are on, no padding when off (then a control knob).
    cuda_graph_buckets: tuple[int, ...] = ()
    shared_rng: bool = False  # control: one engine-wide torch generator for sampling
    num_threads: int = 0  # torch intra-op threads on CPU; 0 leaves torch's default
    tensor_parallel: int = 1  # ranks of the forward: gloo on CPU, NCCL on CUDA (engine.tensor_parallel)
    tensor_parallel_timeout_s: float = 120.0  # one step (or the ranks' load) on every rank, at most
    # The environment the NCCL ranks start under (reference_kernels.collectives.nccl_configs: NCCL
    # reads it once, at init). Only tensor-parallel CUDA ranks have NCCL; elsewhere only the default.
    nccl_config: str = "nccl-default"
    speculative: str = "off"  # "off" or "ngram:K": prompt-lookup drafts of K tokens (engine/speculative.py)

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            self.model = ModelConfig(**self.model)
        if self.split_kv not in ("auto", "none", "fixed"):
            raise ValueError(f"split_kv must be auto, none or fixed, got {self.split_kv!r}")
        if self.prefix_attention not in ("cascade", "one-pass"):
            raise ValueError(f"prefix_attention must be cascade or one-pass, got {self.prefix_attention!r}")
        if self.gemm_strategy not in GEMM_STRATEGIES:
            raise ValueError(f"gemm_strategy must be one of {', '.join(GEMM_STRATEGIES)}, got {self.gemm_strategy!r}")
        if self.splitk_max_m < 0 or self.splitk_parts < 2 or self.split_kv_min_tokens < 1:
            raise ValueError("splitk_max_m must be >= 0, splitk_parts >= 2 and split_kv_min_tokens >= 1")
        if self.split_kv_size < 16:
            raise ValueError(f"split_kv_size must be >= 16 (the decode kernel's smallest key block), got {self.split_kv_size}")
        if self.block_size < 1 or self.chunk_size < 1 or self.max_num_seqs < 1:
            raise ValueError("block_size, chunk_size and max_num_seqs must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs (one decode token each)")
        self.cuda_graph_buckets = tuple(sorted(int(b) for b in self.cuda_graph_buckets))
        if self.cuda_graphs not in CUDA_GRAPHS:
            raise ValueError(f"cuda_graphs must be one of {', '.join(CUDA_GRAPHS)}, got {self.cuda_graphs!r}")
        if self.cuda_graphs == "on" and self.tensor_parallel > 1:
            raise ValueError("cuda_graphs 'on' needs tensor_parallel 1 (tensor-parallel ranks run the forward eager)")
        if any(b < 1 for b in self.cuda_graph_buckets):
            raise ValueError("cuda_graph_buckets must be >= 1")
        if self.tensor_parallel < 1 or self.tensor_parallel_timeout_s <= 0:
            raise ValueError("tensor_parallel must be >= 1 and tensor_parallel_timeout_s > 0")
        parse_speculative(self.speculative)  # ValueError naming a bad value
        self._check_nccl_config()

    def _check_nccl_config(self) -> None:
        """ValueError for an unknown NCCL configuration, or one asked where no NCCL rank would run
        (it would be ignored, and a recorded run would claim a pinning it never had)."""
        from ..reference_kernels.collectives.nccl_configs import CONFIGS, DEFAULT

        if self.nccl_config not in CONFIGS:
            raise ValueError(f"nccl_config must be one of {', '.join(CONFIGS)}, got {self.nccl_config!r}")
        if self.nccl_config != DEFAULT and not (self.device.startswith("cuda") and self.tensor_parallel > 1):
            raise ValueError(f"nccl_config {self.nccl_config!r} needs device cuda and tensor_parallel > 1 "
                             f"(NCCL ranks run only there; got device {self.device}, tensor_parallel "
                             f"{self.tensor_parallel})")  # fmt: skip

    @property
    def spec(self) -> SpecConfig:
        return parse_speculative(self.speculative)

    @property
    def graph_ladder(self) -> tuple[int, ...]:
        """The decode batch sizes padded to: the explicit buckets, else vLLM's default ladder up to
        ``max_num_seqs`` when graphs may be on, else none (no padding)."""
        if self.cuda_graph_buckets or self.cuda_graphs == "off":
            return self.cuda_graph_buckets
        if self.cuda_graphs == "auto" and (not self.device.startswith("cuda") or self.tensor_parallel > 1
                                           or self.model.n_experts):  # fmt: skip
            return ()
        return default_ladder(self.max_num_seqs)

    @property
    def mode(self) -> str:
        return "invariant" if self.batch_invariant else "default"


CUDA_GRAPHS = ("auto", "on", "off")


def default_ladder(max_num_seqs: int) -> tuple[int, ...]:
    """vLLM's default capture sizes (1, 2, 4, then every 8), up to the first that holds ``max_num_seqs``."""
    sizes = [1, 2, 4, *range(8, max_num_seqs + 8, 8)]
    return tuple(s for s in sizes if s < max_num_seqs) + (next(s for s in sizes if s >= max_num_seqs),)


def demo_model() -> ModelConfig:
    """The CPU demo model: hidden 1024, 2 layers, bf16, an LM head with a shared direction, a context
    of 8192 tokens and 50304 ids of which the 259 byte-vocabulary ones are scored.

    Why the context and the reserved ids: drivers written for real engines (SGLang's determinism
    test: prefix prompts of 4097 characters, random token ids up to 50000) must run against the
    default preset. Reserved ids cost nothing unless a prompt holds them (their embedding rows are
    generated on lookup, the LM head has no row for them), so the demo's outputs are bit-identical
    to a 259-id model's.

    Why the shared direction (``lm_head_shared=30``): default mode's designed mechanisms (M-bucket
    split-K, split-KV) move a row's bf16 bits by about one ULP here and there. That changes a
    greedy token only where the top two logits are about one ULP apart. Random LM-head rows give
    logits near zero with margins of many ULPs, so such changes almost never showed: measured on a
    2-core AMD EPYC (AVX-512 BF16; stock bf16 ``F.linear`` is batch-invariant there at K = 1024
    and 2816, this model's shapes), 8 prompts x
    batch {2, 4, 8, 16} vs alone, greedy: without it 4 of 8 prompts forked within 32 tokens (6 of 32
    pairs); with it 8 of 8 within 48 (30 of 32 pairs, median token 13). Small enough that 16
    requests x 48 tokens run in seconds on 2 cores.
    """
    return ModelConfig(
        lm_head_shared=30.0,
        vocab_size=DEMO_VOCAB_SIZE,
        scored_vocab=BYTE_VOCAB_SIZE,
        max_position=DEMO_CONTEXT,
    )


def llama3_8b_sized(vocab_size: int = BYTE_VOCAB_SIZE) -> ModelConfig:
    """Llama-3-8B's shapes (hidden 4096, 32 layers, GQA 32/8, SwiGLU 14336) with synthetic weights.

    The GEMM and attention shapes are what decide kernel choice on a GPU; the byte-level
    vocabulary keeps text in and out of the server lossless.
    """
    return ModelConfig(
        name="synthetic-llama3-8b",
        vocab_size=vocab_size,
        hidden=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        head_dim=128,
        intermediate=14336,
        rope_theta=500000.0,
        max_position=8192,
        **({} if vocab_size == BYTE_VOCAB_SIZE else {"bos_token_id": None, "eos_token_id": None}),
    )


PRESETS = {"demo": demo_model, "llama3-8b": llama3_8b_sized}


def preset_for_model_name(name: str | None) -> str | None:
    """The ``--preset`` that serves a model of this name (None for a real or unknown model)."""
    return next((key for key, make in PRESETS.items() if make().name == name), None)
