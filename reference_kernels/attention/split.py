"""The reference attention's split size: the one number its bits are a function of.

KV is cut into splits of ``SPLIT_SIZE`` keys anchored at position 0, in prefill and decode alike,
so a row's result depends on its own keys only. Changing it changes bits (a different, equally
invariant contract), never the invariance.

Why 1024 (H200, Llama-3-8B heads, bf16, ``bench_attention.py --sweep``, one run; logs under
reports/h200/logs/s7/): at 256, decode read 67% of the copy bandwidth at B=64, KV=4096 and 43% at
B=1, KV=32768 (128 splits per head to merge); at 1024, 82% and 56%, and the prefill, which folds a
split every ``SPLIT_SIZE`` keys, took 4.03 ms instead of 4.22 ms (0.49x -> 0.52x cuDNN). The price is fewer programs for
one short sequence (B=1, KV=4096: 25 us -> 37 us eager). For scale: SGLang's deterministic mode
fixes FlashInfer's decode split at 2048 keys and prefill at 4096, its Triton decode split at 256.
"""

SPLIT_SIZE = 1024
