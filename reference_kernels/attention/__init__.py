"""Batch-invariant attention: varlen prefill and fixed-split-size paged decode."""
