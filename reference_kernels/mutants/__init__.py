"""Mutants: deliberately batch-variant kernels, the positive controls of the suites.

Each implements a mechanism real kernels use; none imports the registry (``catalogue`` registers
them).

- ``splitk_matmul``: split-K matmul, split count chosen from M;
- ``mbucket_matmul``: split-K at M <= 8 rows, one pass above (the bundled engine's default GEMM);
- ``fp8_dynamic_scale``: FP8 GEMM whose activation scale is the amax over the whole batch;
- ``rmsnorm_split``: RMSNorm switching to a split reduction for small batches;
- ``rowsplit``: log-softmax and mean with the same small-batch split;
- ``splitkv_decode``: split-KV decode and prefill, split count from batch x KV heads vs SM count, and
  the batched decode of the bundled engine's default mode (split outputs in the model dtype);
- ``moe_mutants``: round-robin router ties, a batch-wide FP8 expert scale, a rotating
  (atomics-like) combine order.
"""
