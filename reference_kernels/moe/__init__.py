"""Batch-invariant MoE: deterministic router and fused experts."""
