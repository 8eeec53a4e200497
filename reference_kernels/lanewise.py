"""Element-wise transcendental ops with every element on the SIMD path, whatever shares the tensor.

Why: on CPU, ATen runs a unary op's vector loop over blocks of ``2 x Vec::size()`` elements and a
scalar loop over the rest of each thread's range; the two round differently for ``silu``,
``sigmoid`` (fp32) and ``rsqrt`` (bf16) on this Xeon (measured: 48, 33 and 77 of 99 prefix
lengths differed from the same elements inside a longer vector). Which elements fall in a tail
depends on how many rows share the tensor, so the op is batch-variant. Here the input is
flattened, zero-padded to a multiple of :data:`PAD` and run in :data:`CHUNK`-element pieces
(below ATen's 32768-element grain, so one thread each, no thread-range tails): every element
takes the vector loop, so its bits depend on its value alone. The stock kernel computes it
(``<op>.out`` into slices of one buffer), so the values are the stock SIMD ones. CPU only: on
CUDA every element runs the same code already.
"""

from __future__ import annotations

from typing import Any

import torch

PAD = 256  # a multiple of 2 x Vec::size() for every dtype on AVX-512 (64 for bf16/fp16, 32 for fp32)
CHUNK = 16384  # a multiple of PAD, below at::internal::GRAIN_SIZE (32768): one thread per piece
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)

# aten op -> its out= overload, called on each padded piece
LANEWISE_OPS: dict[str, str] = {
    "silu": "silu.out", "sigmoid": "sigmoid.out", "exp": "exp.out", "log": "log.out", "tanh": "tanh.out",
    "cos": "cos.out", "sin": "sin.out", "rsqrt": "rsqrt.out", "erf": "erf.out", "gelu": "gelu.out",
}  # fmt: skip


def lanewise(op: str, x: torch.Tensor, **kwargs: Any) -> torch.Tensor | None:
    """``aten.<op>(x)`` with every element on the vector path; None where it does not apply."""
    if x.device.type != "cpu" or x.dtype not in _FLOATS or x.numel() == 0:
        return None
    out_op = getattr(torch.ops.aten, LANEWISE_OPS[op].split(".")[0]).out
    flat = x.reshape(-1)
    n = flat.numel()
    padded = -(-n // PAD) * PAD
    src = torch.zeros(padded, dtype=x.dtype)
    src[:n] = flat
    dst = torch.empty_like(src)
    for i in range(0, padded, CHUNK):
        out_op(src[i : i + CHUNK], **kwargs, out=dst[i : i + CHUNK])
    return dst[:n].reshape(x.shape)
