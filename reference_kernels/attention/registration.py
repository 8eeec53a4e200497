"""Registry entries for the attention families (called by ``register_builtin_attention``)."""

from __future__ import annotations

import os


def register_all() -> None:
    """Reference, stock (SDPA per backend, FlexAttention) and mutant attention implementations."""
    from ..mutants.splitkv_decode import register_splitkv_decode
    from ..registry import register
    from . import decode_paged, prefill_varlen, stock

    ref = "fixed 256-token KV splits anchored at position 0, fixed-order merge (Triton on CUDA, torch on CPU)"
    register("attention-prefill", "reference", prefill_varlen, role="reference", description=ref)
    register("attention-decode", "reference", decode_paged, role="reference", description=ref)
    if os.environ.get("TRITON_INTERPRET") == "1":

        def prefill_interp(q, k, v, cu_q, cu_k, *, causal=True, scale=None, split_size=256):
            return prefill_varlen(
                q, k, v, cu_q, cu_k, causal=causal, scale=scale, split_size=split_size, backend="triton"
            )

        def decode_interp(q, kc, vc, bt, lens, *, scale=None, split_size=256):
            return decode_paged(q, kc, vc, bt, lens, scale=scale, split_size=split_size, backend="triton")

        desc = "Triton kernels under the interpreter (CPU, tiny shapes; fp16/fp32 only: bf16 dots are wrong there)"
        register("attention-prefill", "reference-triton", prefill_interp, role="reference", description=desc)
        register("attention-decode", "reference-triton", decode_interp, role="reference", description=desc)
    for b in stock.SDPA_BACKENDS:
        devs = ("cpu", "cuda") if b in stock.CPU_BACKENDS else ("cuda",)
        register(
            "attention-prefill",
            f"torch-sdpa-{b}",
            stock.sdpa_prefill(b),
            role="stock",
            devices=devs,
            description=f"F.scaled_dot_product_attention with only the {b} backend",
        )
        register(
            "attention-decode",
            f"torch-sdpa-{b}",
            stock.sdpa_decode(b),
            role="stock",
            devices=devs,
            description=f"F.scaled_dot_product_attention with only the {b} backend (gathered cache)",
        )
    register(
        "attention-prefill",
        "torch-flex",
        stock.flex_prefill,
        role="stock",
        devices=("cuda",),
        description="compiled FlexAttention",
    )
    register(
        "attention-decode",
        "torch-flex",
        stock.flex_decode,
        role="stock",
        devices=("cuda",),
        description="compiled FlexAttention over the gathered cache",
    )
    register_splitkv_decode()
