"""Family ``allreduce``: collectives over a real ``torch.distributed`` process group (gloo on CPU, NCCL on CUDA).

Signature of every implementation, called on each rank of ``group`` at once::

    fn(parts[p, M, H], group) -> [M, H]   # the sum over every rank's parts, in parts' dtype

``parts`` are this rank's ``p`` contributions in order (rank-major across the group: rank 0's
parts come first). ``p`` is 1 when a rank holds one partial product; the ``world-size`` oracle
splits one global ``[P, M, H]`` over 1, 2 or 4 ranks, so a rank of a smaller group holds several.
Why parts and not one pre-summed tensor: a rank's own pre-sum is a summation tree chosen by the
world size, and an all-reduce that wants to be world-size invariant must be free to sum every
contribution in one global order. Stock kernels pre-sum locally and reduce that, as a row-parallel
layer's local GEMM does. Rows on dim 1 are the batch (the message is ``M x H`` elements).

Modules: ``stock`` (``dist.all_reduce`` on gloo or NCCL; reduce-scatter + all-gather),
``reference`` (all-gather, then one fixed order), ``symm_mem`` (torch's symmetric-memory one-shot
all-reduce, CUDA), ``nccl_configs`` (the named NCCL environments engines pin), ``group`` (spawned
ranks that run any of them) and ``timing`` (rank-side timing for the benchmark); the last two are
harness plumbing.
"""
