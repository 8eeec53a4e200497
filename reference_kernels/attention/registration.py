"""Registry entries for the attention families (called by ``register_builtin_attention``)."""

from __future__ import annotations


def register_all() -> None:
    """Reference implementations of ``attention-prefill`` and ``attention-decode``."""
    from ..registry import register
    from . import decode_paged, prefill_varlen

    register(
        "attention-prefill",
        "reference",
        prefill_varlen,
        role="reference",
        description="fixed 256-token KV splits anchored at position 0, fixed-order merge",
    )
    register(
        "attention-decode",
        "reference",
        decode_paged,
        role="reference",
        description="paged split-KV with fixed split size 256, fixed-order merge",
    )
