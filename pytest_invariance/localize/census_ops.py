"""One distinct op of a forward pass, replayable at the model's own shapes on synthetic rows.

From the probe-alone run and a run of ``n0`` rows (calls kept, ``trace(keep_calls=True)``), each
op gets: which tensor arguments carry the batch (``rows.layout``), their per-row shapes, the
integer arguments that scale with the batch (a ``view`` to ``[B*T, H]``), and its output's batch
dim. :meth:`OpSpec.fn` then builds ``f(rows[n, P]) -> [n, ...]`` that packs each row's inputs
into one flat row of the op's dtype, so the tensor oracles (``oracles.batch``) run on it as on
any kernel. Ops it cannot replay honestly say why (``skip``) instead of running something else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .rows import ROW, WHOLE, Layout, is_data_movement, layout
from .trace import TENSOR, Event

FAMILY_OF = {"mm": "matmul", "addmm": "matmul", "bmm": "matmul", "matmul": "matmul", "linear": "matmul",
             "rms_norm": "rmsnorm", "_fused_rms_norm": "rmsnorm", "_log_softmax": "softmax", "_softmax": "softmax",
             "mean": "mean", "_scaled_mm": "fp8-gemm", "_scaled_grouped_mm": "moe-experts"}  # fmt: skip
# The newer families: torch's own ops and the custom ops engines register (vLLM ``_C`` / ``vllm``,
# SGLang ``sgl_kernel``, fla / mamba_ssm wrappers), by their op name without namespace.
FAMILY_OF.update({
    **dict.fromkeys(("fused_add_rms_norm", "fused_add_rmsnorm", "gemma_fused_add_rmsnorm"), "add-rmsnorm"),
    **dict.fromkeys(("rms_norm_static_fp8_quant", "fused_add_rms_norm_static_fp8_quant",
                     "rms_norm_dynamic_per_token_quant", "rms_norm_per_block_quant", "scaled_fp8_quant",
                     "dynamic_scaled_fp8_quant", "static_scaled_fp8_quant", "dynamic_per_token_scaled_fp8_quant"),
                    "rmsnorm-fp8-quant"),
    **dict.fromkeys(("w8a8_block_fp8_matmul", "cutlass_scaled_mm_blockwise", "fp8_blockwise_scaled_mm",
                     "per_token_group_quant_fp8", "deep_gemm_fp8_fp8_bf16_nt"), "fp8-block-gemm"),
    **dict.fromkeys(("_weight_int4pack_mm", "_weight_int4pack_mm_for_cpu", "_weight_int4pack_mm_with_scales_and_zeros",
                     "awq_gemm", "awq_dequantize", "gptq_gemm", "gptq_marlin_gemm", "marlin_gemm", "machete_mm"),
                    "int4-gemm"),
    **dict.fromkeys(("lora_shrink", "lora_expand", "sgmv_shrink", "sgmv_expand", "bgmv_shrink", "bgmv_expand",
                     "bgmv_expand_slice", "sgmv_expand_slice"), "lora"),
    **dict.fromkeys(("mamba_chunk_scan_combined", "selective_state_update", "selective_scan_fwd", "ssd_combined",
                     "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "chunk_simple_gla",
                     "fused_recurrent_simple_gla"), "linear-attention"),
})  # fmt: skip


def packet(name: str) -> str:
    """``mm`` of ``aten.mm.default``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else name


def family_of(name: str) -> str:
    """The kernel family of an aten op where one maps, else the op's own name."""
    p = packet(name)
    if "scaled_dot_product" in p:
        return "attention-prefill"
    return FAMILY_OF.get(p, name)


@dataclass(frozen=True)
class Scale:
    """An integer argument that is ``alone`` for the probe alone and ``n * alone`` for n rows."""

    alone: int


@dataclass
class OpSpec:
    name: str
    func: Any
    template: Any  # (args, kwargs) leaves: TENSOR, Scale, or the value
    in_layouts: list[Layout]
    in_shapes: list[tuple[int, ...]]  # probe-alone shapes
    in_dtypes: list[str]
    out_layout: Layout
    out_shape: tuple[int, ...]
    dtype: str  # of the row inputs
    paths: list[str] = field(default_factory=list)
    skip: str | None = None

    @property
    def key(self) -> tuple:
        rows = tuple((s, d) for s, d, lay in zip(self.in_shapes, self.in_dtypes, self.in_layouts, strict=True) if lay.kind == ROW)
        return (self.name, rows, tuple(s for s, lay in zip(self.in_shapes, self.in_layouts, strict=True) if lay.kind == WHOLE))

    @property
    def row_shapes(self) -> list[tuple[int, ...]]:
        return [s for s, lay in zip(self.in_shapes, self.in_layouts, strict=True) if lay.kind == ROW]

    @property
    def row_numel(self) -> int:
        return sum(prod(s) for s in self.row_shapes)

    def fn(self, seed: int, device: torch.device, func: Callable | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
        """``f(rows[n, row_numel]) -> [n, *out_shape]``; whole inputs are seeded synthetic tensors."""
        from pytest_invariance.oracles.inputs import wide_spread

        func = func or self.func
        wholes = {i: wide_spread(s, seed + 1000 + i, getattr(torch, d), device=device)
                  for i, (s, d, lay) in enumerate(zip(self.in_shapes, self.in_dtypes, self.in_layouts, strict=True))
                  if lay.kind == WHOLE}  # fmt: skip
        leaves, spec = tree_flatten(self.template)
        out_lay = self.out_layout
        inplace = packet(self.name).endswith("_")  # add_ and friends write into their first argument

        def f(rows: torch.Tensor) -> torch.Tensor:
            n = rows.shape[0]
            ts, off = [], 0
            for i, (s, lay) in enumerate(zip(self.in_shapes, self.in_layouts, strict=True)):
                if lay.kind == WHOLE:
                    ts.append(wholes[i].clone() if inplace else wholes[i])
                    continue
                m = prod(s)
                per = rows[:, off : off + m].reshape(n, *s)
                off += m
                ts.append(torch.cat(per.unbind(0), dim=lay.dim) if n > 1 else per[0].clone())
            it = iter(ts)
            filled = [next(it) if leaf == TENSOR else n * leaf.alone if isinstance(leaf, Scale) else leaf for leaf in leaves]
            args, kwargs = tree_unflatten(filled, spec)
            out = func(*args, **kwargs)
            out = out[0] if isinstance(out, (tuple, list)) else out
            return torch.stack(out.chunk(n, dim=out_lay.dim)) if n > 1 else out[None]

        return f


def _is_tensor_slot(leaf: Any) -> bool:
    return isinstance(leaf, str) and leaf == TENSOR


def _template(alone: Any, batched: Any, n0: int) -> tuple[Any, str | None]:
    la, spec = tree_flatten(alone)
    lb, _ = tree_flatten(batched)
    if len(la) != len(lb):
        return None, "arguments differ in structure between the runs"
    out = []
    for a, b in zip(la, lb, strict=True):
        if _is_tensor_slot(a) or a == b:
            out.append(a)
        elif isinstance(a, int) and isinstance(b, int) and b == n0 * a:
            out.append(Scale(a))
        else:
            return None, f"a non-tensor argument changes with the batch ({a!r} alone, {b!r} for {n0} rows)"
    return tree_unflatten(out, spec), None


def spec_of(alone: Event, batched: Event, n0: int) -> OpSpec:
    """The replayable spec of one paired op (``skip`` says why it cannot be replayed)."""
    func, targs = alone.call
    template, why = _template(targs, batched.call[1], n0)
    in_lays = [layout(a, b, n0) for a, b in zip(alone.in_shapes, batched.in_shapes, strict=True)]
    out_lay = layout(alone.out_shapes[0], batched.out_shapes[0], n0) if alone.out_shapes else Layout("unknown")
    row_dtypes = {d for d, lay in zip(alone.in_dtypes, in_lays, strict=True) if lay.kind == ROW}
    spec = OpSpec(alone.name, func, template, in_lays, alone.in_shapes, alone.in_dtypes, out_lay,
                  alone.out_shapes[0] if alone.out_shapes else (), ",".join(sorted(row_dtypes)), [alone.path])  # fmt: skip
    if is_data_movement(alone.name):
        spec.skip = "data movement: copies bits, cannot round"
    elif not row_dtypes:
        spec.skip = "no input carries the batch"
    elif any(lay.kind not in (ROW, WHOLE) for lay in in_lays):
        spec.skip = "an input's batch layout is unknown"
    elif out_lay.kind != ROW:
        spec.skip = f"output has no batch row ({out_lay.kind})"
    elif len(row_dtypes) > 1 or not getattr(torch, next(iter(row_dtypes))).is_floating_point:
        spec.skip = f"row inputs are indices or masks, or of mixed dtypes ({', '.join(sorted(row_dtypes))}): no synthetic rows"
    elif any(lay.kind == WHOLE and not getattr(torch, d).is_floating_point
             for d, lay in zip(alone.in_dtypes, in_lays, strict=True)):  # fmt: skip
        spec.skip = "a non-floating input without a batch row (indices, masks): no synthetic stand-in"
    elif why:
        spec.skip = why
    return spec
