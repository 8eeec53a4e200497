"""Mutants: deliberately batch-variant kernels, the positive controls of the suites.

- ``splitk_matmul``: split-K matmul, split count chosen from M;
- ``rmsnorm_split``: RMSNorm switching to a split reduction for small batches;
- ``rowsplit``: log-softmax and mean with the same small-batch split.
"""
