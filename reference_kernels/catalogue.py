"""The kernel catalogue: every built-in stock, reference and mutant implementation, in one place.

Why one module: the families (``matmul``, ``rowops``, ``attention``, ``moe``...) and the mutants
implement kernels and know nothing of the registry or of each other's registration; this module
imports them and registers what the shipped suites iterate over. So there is one registration
style, the ``TRITON_INTERPRET`` rows are declared once (:func:`_interpreter_rows`), and no kernel
module imports back into a registration module (no import circles).

Groups, each registered at most once per process by :func:`register_builtin`:

- ``rowops``: ``rmsnorm``, ``softmax`` (log-softmax), ``mean``;
- ``gemm``: ``matmul`` and ``fp8-gemm``;
- ``attention``: ``attention-prefill`` and ``attention-decode``;
- ``moe``: ``moe-router`` and ``moe-experts``;
- ``fused-norm``: ``add-rmsnorm``, ``rmsnorm-fp8-quant``; ``quant-gemm``: ``fp8-block-gemm``,
  ``int4-gemm``; ``lora``: ``lora``; ``scan``: ``linear-attention``;
- ``collectives``: ``allreduce`` (gloo process groups on CPU, NCCL on CUDA under each named
  configuration of ``collectives.nccl_configs``; run through ``collectives.group``).

Call signatures per family are in ``registry``'s docstring and the family modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

from .device import interpreting
from .registry import register

INTERPRETED = "reference-triton"  # the name of every interpreter row


def _stock(family: str, name: str, fn: Callable, description: str, devices: Iterable[str] = ("cpu", "cuda")) -> None:
    register(family, name, fn, role="stock", devices=tuple(devices), description=description)


def _reference(family: str, fn: Callable, description: str) -> None:
    register(family, "reference", fn, role="reference", description=description)


def _mutant(family: str, name: str, fn: Callable, description: str, oracle_expect: dict | None = None) -> None:
    register(family, f"mutant:{name}", fn, role="mutant", description=description, oracle_expect=oracle_expect)


def _interpreter_rows(rows: dict[str, Callable], what: str) -> None:
    """The reference Triton kernels under the interpreter, as ``reference-triton`` rows on CPU.

    Only registered under ``TRITON_INTERPRET=1``; their ``tl.dot`` is element-wise there
    (``interpreter_dot``), so these rows check a kernel's structure, not the GPU's rounding."""
    if not interpreting():
        return
    desc = f"{what} under the Triton interpreter with element-wise tl.dot (CPU, tiny shapes)"
    for family, fn in rows.items():
        register(family, INTERPRETED, fn, role="reference", devices=("cpu",), description=desc)


# --- groups ---------------------------------------------------------------------------------------


def _rowops() -> None:
    from . import rowops
    from .mutants.rmsnorm_split import split_rmsnorm
    from .mutants.rowsplit import split_log_softmax, split_mean

    _stock("rmsnorm", "torch", rowops.stock_rmsnorm, "F.rms_norm")
    _stock("softmax", "torch", rowops.stock_log_softmax, "torch.log_softmax(x, -1)")
    _stock("mean", "torch", rowops.stock_mean, "x.mean(-1)")
    desc = "Triton one program per row on CUDA; pairwise-halving torch sum on CPU"
    _reference("rmsnorm", rowops.rmsnorm, desc)
    _reference("softmax", rowops.log_softmax_last, desc)
    _reference("mean", rowops.mean_last, desc)
    _interpreter_rows(
        {
            "rmsnorm": lambda x, w, eps=None: rowops.rms_norm(x, w, eps, backend="interpret"),
            "softmax": lambda x: rowops.log_softmax(x, -1, backend="interpret"),
            "mean": lambda x: rowops.mean(x, -1, backend="interpret"),
        },
        "Triton row kernels",
    )
    _mutant("rmsnorm", "rmsnorm-split", split_rmsnorm,
            "sum of squares split into 8/4/3/1 pieces for M<=4/16/32/more, pieces added in fp32")  # fmt: skip
    _mutant("softmax", "logsoftmax-split", split_log_softmax, "sum of exp split into 8/4/3/1 pieces for M<=4/16/32/more")
    _mutant("mean", "mean-split", split_mean, "row sum split into 8/4/3/1 pieces for M<=4/16/32/more")


def _gemm() -> None:
    from . import fp8, matmul
    from .mutants.fp8_dynamic_scale import fp8_dynamic_scale_linear
    from .mutants.mbucket_matmul import MAX_M, PARTS, m_bucket_linear
    from .mutants.splitk_matmul import splitk_matmul

    _stock("matmul", "torch", matmul.stock_linear, "F.linear (cuBLAS / CPU BLAS)")
    _reference("matmul", matmul.linear, "Triton fixed-tile matmul on CUDA; 16-row-tiled BLAS on CPU")
    _stock("fp8-gemm", "torch", fp8.stock_fp8_linear, "torch._scaled_mm")
    _reference("fp8-gemm", fp8.fp8_linear, "Triton fixed-tile e4m3 GEMM on CUDA; exact-product tiled fp32 BLAS on CPU")
    _interpreter_rows(
        {"matmul": matmul.linear_interpret, "fp8-gemm": fp8.fp8_linear_interpret}, "the reference Triton GEMMs"
    )
    _mutant("matmul", "splitk-matmul", splitk_matmul,
            "split-K with the split count chosen from M (8/4/2/1 splits for M<=8/32/128/more)")  # fmt: skip
    _mutant("matmul", "m-bucket-splitk", m_bucket_linear,
            f"split-K ({PARTS} fp32 partials, one rounding) at M <= {MAX_M} rows, one F.linear pass above;"
            " the bundled engine's default GEMM",
            # M alone picks the path, and one fp32-partial sum rounded once rarely moves a bf16 bit
            # of a single row (H200: invariant at K=896), so only the all-rows batch oracle must see it.
            {"batch-position": "measure"})  # fmt: skip
    _mutant("fp8-gemm", "fp8-dynamic-scale", fp8_dynamic_scale_linear, "per-tensor activation scale = amax over the whole batch")


def _attention() -> None:
    from . import attention
    from .attention import stock
    from .mutants.splitkv_decode import splitkv_decode, splitkv_decode_batched, splitkv_prefill

    ref = "fixed 256-token KV splits anchored at position 0, fixed-order merge (Triton on CUDA, torch on CPU)"
    _reference("attention-prefill", attention.prefill_varlen, ref)
    _reference("attention-decode", attention.decode_paged, ref)
    _interpreter_rows(
        {
            "attention-prefill": partial(attention.prefill_varlen, backend="interpret"),
            "attention-decode": partial(attention.decode_paged, backend="interpret"),
        },
        "the reference Triton attention kernels",
    )
    for b in stock.SDPA_BACKENDS:
        devs = ("cpu", "cuda") if b in stock.CPU_BACKENDS else ("cuda",)
        _stock("attention-prefill", f"torch-sdpa-{b}", stock.sdpa_prefill(b),
               f"F.scaled_dot_product_attention with only the {b} backend", devs)  # fmt: skip
        _stock("attention-decode", f"torch-sdpa-{b}", stock.sdpa_decode(b),
               f"F.scaled_dot_product_attention with only the {b} backend (gathered cache)", devs)  # fmt: skip
    _stock("attention-prefill", "torch-flex", stock.flex_prefill, "compiled FlexAttention", ("cuda",))
    _stock("attention-decode", "torch-flex", stock.flex_decode, "compiled FlexAttention over the gathered cache", ("cuda",))
    _mutant("attention-decode", "splitkv-decode", splitkv_decode,
            "split-KV decode, split count from batch x kv heads vs SM count (FlashDecoding-style)")  # fmt: skip
    _mutant("attention-decode", "splitkv-decode-batched", splitkv_decode_batched,
            "the whole batch cut at one split count (batch x kv heads vs units, longest context), split"
            " outputs stored in the model dtype; the bundled engine's default decode")  # fmt: skip
    _mutant("attention-prefill", "splitkv-prefill", splitkv_prefill,
            "split-KV prefill, split count from number of sequences x kv heads vs SM count")  # fmt: skip


def _moe() -> None:
    from .moe import fused_experts, fused_experts_fp8
    from .moe.router import route, route_topk_stock
    from .moe.stock import experts_loop
    from .mutants.moe_mutants import experts_atomic_combine, fp8_experts_batch_scale, round_robin_ties_router

    for order in ("sorted", "unsorted"):
        _stock("moe-router", f"torch-topk-{order}", partial(route_topk_stock, sorted=order == "sorted"),
               f"torch.softmax/sigmoid + torch.topk(sorted={order == 'sorted'})")  # fmt: skip
    _reference("moe-router", route, "stable descending sort: ties to the lowest expert index; fixed-order sums")
    _stock("moe-experts", "torch-loop", experts_loop,
           "per-expert loop of torch.mm (M = tokens routed to the expert), index_add_ combine")  # fmt: skip
    _reference("moe-experts", fused_experts, "Triton fused MoE (one tile config, no split-K) on CUDA; fixed-order torch on CPU")
    register("moe-experts", "reference-fp8", fused_experts_fp8, role="reference",
             description="FP8 experts, per-token activation scales (fp8 signature)")  # fmt: skip
    _mutant("moe-router", "round-robin-ties", round_robin_ties_router,
            "ties broken round-robin from the row's batch position plus a pointer kept across calls")  # fmt: skip
    _mutant("moe-experts", "fp8-batch-scale", fp8_experts_batch_scale,
            "FP8 experts, activation scale = max over the whole batch (fp8 signature)")  # fmt: skip
    _mutant("moe-experts", "atomic-combine", experts_atomic_combine,
            "reference experts, slot outputs summed in an order that rotates per call (atomics)")  # fmt: skip


def _collectives() -> None:
    from .collectives import nccl_configs, reference, stock, symm_mem
    from .mutants.ring_allreduce import CHANNEL_BYTES, ring_all_reduce

    cpu, cuda, both = ("cpu",), ("cuda",), ("cpu", "cuda")
    _stock("allreduce", "torch-gloo", stock.gloo_all_reduce, "dist.all_reduce(SUM) on gloo, local parts summed first", cpu)
    _stock("allreduce", "torch-gloo-rs-ag", stock.reduce_scatter_all_gather,
           "gloo reduce-scatter then all-gather of the flat message (sequence-parallel split)", cpu)  # fmt: skip
    for name, cfg in nccl_configs.STOCK_ROWS.items():  # one pool of ranks per configuration
        _stock("allreduce", name, stock.nccl_all_reduce,
               f"dist.all_reduce(SUM) on NCCL ranks started under {cfg}: {nccl_configs.CONFIGS[cfg].why}", cuda)  # fmt: skip
    if symm_mem.unavailable() is None:  # otherwise the suite records the reason as unsupported
        _stock("allreduce", symm_mem.NAME, symm_mem.symm_mem_all_reduce,
               "torch symmetric memory: local sum copied to a rendezvoused buffer, one_shot_all_reduce", cuda)  # fmt: skip
    register("allreduce", "reference", reference.fixed_order_all_reduce, role="reference", devices=both,
             description="all-gather every rank's parts, sum in global rank order in fp32, round once")  # fmt: skip
    register("allreduce", "mutant:ring-channels", ring_all_reduce, role="mutant", devices=both,
             description=f"send/recv ring, channels x world chunks, channels from message bytes {CHANNEL_BYTES}")  # fmt: skip


def _fused_norm() -> None:
    from . import fused_norm as fn
    from .mutants import fused_norm_mutants as mut

    _stock("add-rmsnorm", "torch", fn.stock_add_rms_norm, "residual.add_(x), then F.rms_norm copied into x")
    _reference("add-rmsnorm", fn.add_rms_norm,
               "in place; one Triton program per row on CUDA, pairwise-halving torch sum on CPU")  # fmt: skip
    _stock("rmsnorm-fp8-quant", "torch", fn.stock_rms_norm_fp8_quant, "F.rms_norm, then e4m3 (static or per-token scale)")
    _stock("rmsnorm-fp8-quant", "torch-tensor-dynamic", fn.stock_rms_norm_fp8_tensor_dynamic,
           "F.rms_norm, then e4m3 with one dynamic scale over the batch (scaled_fp8_quant without a scale)")  # fmt: skip
    _reference("rmsnorm-fp8-quant", fn.rms_norm_fp8_quant,
               "one Triton program per row (norm, row amax, e4m3 store) on CUDA; tree-sum norm on CPU")  # fmt: skip
    _interpreter_rows(
        {"add-rmsnorm": fn.add_rms_norm_interpret, "rmsnorm-fp8-quant": fn.rms_norm_fp8_interpret},
        "the fused-norm Triton kernels",
    )
    _mutant("add-rmsnorm", "add-rmsnorm-block-switch", mut.add_rmsnorm_block_switch,
            f"below {mut.SWITCH_ROWS} rows the sum of squares is split {mut.SPLITS} ways, partials in the"
            " activation dtype; one pass from 256 (vllm#48271)")  # fmt: skip
    _mutant("rmsnorm-fp8-quant", "rmsnorm-fp8-tensor-dynamic", mut.rmsnorm_fp8_tensor_dynamic,
            "reference norm, then one e4m3 scale = amax over the whole batch (vllm#57016)")  # fmt: skip


def _quant_gemm() -> None:
    from . import fp8_block, int4
    from .mutants import quant_gemm_mutants as mut

    _stock("fp8-block-gemm", "torch-dequant", fp8_block.stock_dequant_linear,
           "both sides dequantized to bf16 (same 1x128 / 128x128 scales), then F.linear")  # fmt: skip
    _stock("fp8-block-gemm", "torch-scaled-mm", fp8_block.stock_scaled_mm_blockwise,
           "F.scaled_mm with BlockWise1x128 and BlockWise128x128 scales (cuBLASLt, sm90+)", ("cuda",))  # fmt: skip
    _reference("fp8-block-gemm", fp8_block.fp8_block_linear,
               "per 128-wide K block: e4m3 dot in fp32, times both scales, one accumulator; Triton one tile"
               " config on CUDA, 16-row-tiled BLAS per block on CPU")  # fmt: skip
    _stock("int4-gemm", "torch-dequant", int4.stock_dequant_linear, "weight dequantized to bf16, then F.linear")
    _stock("int4-gemm", "torch-int4pack", int4.stock_int4pack,
           "torch's int4 weight-only kernel (_weight_int4pack_mm_for_cpu / tinygemm _weight_int4pack_mm)")  # fmt: skip
    _reference("int4-gemm", int4.int4_linear,
               "bf16 dequantized weight, fixed-order fp32 GEMM: fused dequant + tl.dot (one tile config) on"
               " CUDA, 16-row-tiled BLAS on CPU")  # fmt: skip
    _interpreter_rows(
        {"fp8-block-gemm": fp8_block.fp8_block_linear_interpret, "int4-gemm": int4.int4_linear_interpret},
        "the quantized-GEMM Triton kernels",
    )
    split = ", ".join(f"{s} at M<={m}" for m, s in mut.SPLIT_TABLE)
    _mutant("fp8-block-gemm", "fp8-block-splitk", mut.fp8_block_splitk,
            f"K blocks split into slices ({split}, one above), slices rounded to bf16")  # fmt: skip
    _mutant("int4-gemm", "int4-splitk-by-batch", mut.int4_splitk_by_batch,
            f"Marlin-style K split by batch size ({split}, one above), slices reduced through bf16")  # fmt: skip


def _lora() -> None:
    from . import lora
    from .mutants.lora_segment import SMALL_SEGMENT, SPLITS, lora_segment_splitk

    _stock("lora", "torch-adapter-loop", lora.stock_adapter_loop,
           "PEFT-style: per adapter in use, F.linear shrink and expand over its tokens")  # fmt: skip
    _stock("lora", "torch-bgmv", lora.stock_bgmv, "vLLM's torch ops: einsum over gathered adapter weights, fp32")
    _reference("lora", lora.lora_apply,
               "per token: fixed-order fp32 shrink and expand over its own adapter (Triton per token on CUDA,"
               " tree sums over gathered weights on CPU); id -1 keeps base's bits")  # fmt: skip
    _interpreter_rows({"lora": lora.lora_apply_interpret}, "the LoRA Triton kernels")
    _mutant("lora", "lora-segment-splitk", lora_segment_splitk,
            f"SGMV-style: a segment of <= {SMALL_SEGMENT} tokens sharing an adapter splits the shrink {SPLITS}"
            " ways, partials in the activation dtype")  # fmt: skip


def _scan() -> None:
    from . import linear_attention as la
    from .mutants import scan_chunk as mut

    _stock("linear-attention", "torch-chunked", la.stock_chunked,
           f"chunked scan (chunks of {la.CHUNK} from each call's start, intra-chunk matmuls) for prefill,"
           " recurrent step for decode")  # fmt: skip
    _reference("linear-attention", la.scan,
               "the recurrence token by token (Triton per sequence x head x DV block on CUDA; det_exp and"
               " tree sums on CPU): prefill, chunked prefill and decode share one arithmetic")  # fmt: skip
    _interpreter_rows({"linear-attention": la.scan_interpret}, "the linear-attention Triton scan")
    _mutant("linear-attention", "scan-chunk-by-batch", mut.scan_chunk_by_batch,
            f"chunked scan, chunks of {mut.SMALL} tokens for <= {mut.SMALL_BATCH} sequences, {mut.LARGE} above;"
            " recurrent decode")  # fmt: skip


GROUPS: dict[str, Callable[[], None]] = {
    "rowops": _rowops, "gemm": _gemm, "attention": _attention, "moe": _moe, "collectives": _collectives,
    "fused-norm": _fused_norm, "quant-gemm": _quant_gemm, "lora": _lora, "scan": _scan,
}  # fmt: skip
GROUP_FAMILIES: dict[str, tuple[str, ...]] = {
    "rowops": ("rmsnorm", "softmax", "mean"),
    "gemm": ("matmul", "fp8-gemm"),
    "attention": ("attention-prefill", "attention-decode"),
    "moe": ("moe-router", "moe-experts"),
    "collectives": ("allreduce",),
    "fused-norm": ("add-rmsnorm", "rmsnorm-fp8-quant"),
    "quant-gemm": ("fp8-block-gemm", "int4-gemm"),
    "lora": ("lora",),
    "scan": ("linear-attention",),
}


def register_builtin(*groups: str) -> None:
    """Register the named groups (every group when none is named)."""
    for g in groups or tuple(GROUPS):
        if g not in GROUPS:
            raise ValueError(f"unknown kernel group {g!r}; expected one of {', '.join(GROUPS)}")
        GROUPS[g]()


def implementation(family: str, name: str) -> Callable:
    """The registered function of ``family`` called ``name`` (the matrix's implementation name),
    registering the built-in groups first; KeyError naming what exists when there is none."""
    from .registry import kernels

    found = {k.name: k.fn for k in kernels(family)}
    if name not in found:
        register_builtin(*(g for g, fams in GROUP_FAMILIES.items() if family in fams))
        found = {k.name: k.fn for k in kernels(family)}
    if name not in found:
        raise KeyError(f"no {family} implementation {name!r}; registered: {', '.join(sorted(found))}")
    return found[name]


def is_fp8_experts(name: str) -> bool:
    """Whether a ``moe-experts`` implementation takes the FP8 signature (its name says ``fp8``)."""
    return "fp8" in name
