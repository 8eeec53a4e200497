"""The project's words, defined once: families, oracles, quantizations, verdicts, engines, profiles.

Records, reports, the plugin, the suites and the adapters use these names (DESIGN.md's
vocabulary); a word spelled in two places drifts, so every other module imports it from here.
Pure data: no torch, no pytest.
"""

from __future__ import annotations

FAMILIES = (
    "matmul", "rmsnorm", "softmax", "mean", "attention-prefill", "attention-decode", "fp8-gemm",
    "moe-router", "moe-experts", "allreduce", "add-rmsnorm", "rmsnorm-fp8-quant", "fp8-block-gemm", "int4-gemm",
    "lora", "linear-attention", "engine",
)  # fmt: skip

# Oracles
BATCH_SIZE = "batch-size"
BATCH_POSITION = "batch-position"
RUN_TO_RUN = "run-to-run"
CHUNKING = "chunking"
PREFILL_DECODE = "prefill-decode"
CACHE = "cache"
UNIQUE_SAMPLES = "unique-samples"
SEEDED_SAMPLING = "seeded-sampling"
PRECISION = "precision"
PERF = "perf"  # speed against stock, recorded beside the verdicts
WORLD_SIZE = "world-size"  # the same global tensor reduced at TP1, TP2, TP4 (oracles.world)
SPECULATIVE = "speculative"  # speculative decoding vs plain decoding, same greedy prompts
LOCALIZE = "localize"  # the first op inside a model whose probe-row output diverged
NEIGHBOURS = "neighbours"  # the same probe and batch size, neighbours' per-row parameters changed (LoRA ids)
WORKLOAD = "workload"  # e2e fuzz: the probe beside generated co-running workloads vs the probe alone
TENSOR_ORACLES = (BATCH_SIZE, BATCH_POSITION, RUN_TO_RUN, CHUNKING, WORLD_SIZE)  # run on tensors
OP_ORACLES = (BATCH_SIZE, BATCH_POSITION, RUN_TO_RUN)  # what every per-op suite row runs
ORACLES = (*TENSOR_ORACLES, NEIGHBOURS, PREFILL_DECODE, CACHE, UNIQUE_SAMPLES, SEEDED_SAMPLING, PRECISION,
           SPECULATIVE, LOCALIZE, PERF, WORKLOAD)

# Verdicts (oracles.verdict decides them)
INVARIANT = "invariant"
DIVERGENT = "divergent"
VACUOUS = "vacuous"
INCOMPLETE = "incomplete"
UNSUPPORTED = "unsupported"
VERDICTS = (INVARIANT, DIVERGENT, VACUOUS, INCOMPLETE, UNSUPPORTED)

# Quantization of a plain floating dtype (by torch dtype name): fp32 is IEEE unless measured otherwise.
QUANTIZATION_OF_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32-ieee"}

# Quantizations of the quantized families that are not a plain dtype (the fp8-e4m3-* names live in
# reference_kernels.fp8): DeepSeek-V3 block FP8 (128x128 weight blocks, 1x128 activation groups)
# and int4 weight-only with a scale and zero per 128 input channels (GPTQ/AWQ), bf16 activations.
FP8_BLOCK = "fp8-e4m3-block128"
INT4_G128 = "int4-g128-bf16"

ENGINES = ("bundled", "vllm", "sglang", "openai")  # adapter flavours of a live target
SHARED_RNG = "shared-rng"  # the bundled engine's one-RNG-stream control: its own implementation variant
CONTROL_VARIANTS = (SHARED_RNG,)  # engine knobs that break invariance on purpose (``bundled+shared-rng``)
PROFILES = ("quick", "full", "exhaustive")  # sweep sizes (oracles.sweeps.batch_sweep)


def quantization_of(dtype: object) -> str:
    """``bf16`` / ``fp16`` / ``fp32-ieee`` for a torch dtype or its name; the name itself otherwise."""
    name = str(dtype).replace("torch.", "")
    return QUANTIZATION_OF_DTYPE.get(name, name or "unknown")


# How the matrix's glance view writes a verdict and an oracle in a few characters.
VERDICT_SYMBOLS = {INVARIANT: "✔", DIVERGENT: "✘", VACUOUS: "∅", INCOMPLETE: "…", UNSUPPORTED: "–"}
ORACLE_SHORT = {
    BATCH_SIZE: "size", BATCH_POSITION: "pos", RUN_TO_RUN: "rerun", CHUNKING: "chunk",
    PREFILL_DECODE: "p/d", CACHE: "cache", UNIQUE_SAMPLES: "uniq", SEEDED_SAMPLING: "seed",
    PRECISION: "prec", PERF: "perf", WORLD_SIZE: "tp", SPECULATIVE: "spec", LOCALIZE: "loc", NEIGHBOURS: "nbr",
    WORKLOAD: "fuzz",
}  # fmt: skip
