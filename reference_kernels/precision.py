"""Which arithmetic does an "fp32" matmul really use?

A kernel asked for fp32 may silently run TF32 (inputs cut to a 10-bit
mantissa) or a bf16 path on the tensor cores. That changes accuracy and, when
it depends on shape, invariance. The check multiplies ordinary fp32 inputs,
computes in float64 the products the candidate arithmetics would give (exact
inputs; inputs rounded to 10 or 7 mantissa bits, to nearest or toward zero) and
picks the candidate the kernel's output is closest to, with errors normalised
by ``|x| @ |w|.T`` so no element dominates by magnitude.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

IEEE = "ieee-fp32"
TF32 = "tf32-like"
BF16 = "bf16-like"
CLASSES = (IEEE, TF32, BF16)
# Record quantization names for each class (docs/API.md vocabulary).
QUANTIZATION = {IEEE: "fp32-ieee", TF32: "fp32-tf32", BF16: "fp32-bf16"}

# (class, mantissa bits kept, rounding) -> candidate input rounding
_CANDIDATES: tuple[tuple[str, str, int | None, str], ...] = (
    ("exact", IEEE, None, ""),
    ("tf32-rn", TF32, 10, "rn"),
    ("tf32-rz", TF32, 10, "rz"),
    ("bf16-rn", BF16, 7, "rn"),
    ("bf16-rz", BF16, 7, "rz"),
)


def round_mantissa(x: torch.Tensor, bits: int, mode: str = "rn") -> torch.Tensor:
    """fp32 ``x`` with its mantissa cut to ``bits`` bits: ``rn`` nearest-even, ``rz`` toward zero."""
    if x.dtype != torch.float32:
        raise TypeError("round_mantissa expects float32")
    shift = 23 - bits
    # Unsigned bit pattern in int64: a mantissa carry moves into the exponent, never the sign.
    i = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    if mode == "rn":
        lsb = (i >> shift) & 1
        i = i + ((1 << (shift - 1)) - 1) + lsb
    elif mode != "rz":
        raise ValueError(f"unknown rounding {mode!r}")
    i = i & ~((1 << shift) - 1)
    i = torch.where(i >= 2**31, i - 2**32, i)
    return i.to(torch.int32).view(torch.float32)


@dataclass
class PrecisionResult:
    """The class picked and the normalised median error against every candidate."""

    precision_class: str
    best_candidate: str
    errors: dict[str, float] = field(default_factory=dict)
    shape: dict[str, int] = field(default_factory=dict)

    @property
    def quantization(self) -> str:
        return QUANTIZATION[self.precision_class]

    @property
    def is_tf32(self) -> bool:
        return self.precision_class == TF32

    def to_dict(self) -> dict:
        return {
            "precision_class": self.precision_class,
            "best_candidate": self.best_candidate,
            "errors": self.errors,
            "shape": self.shape,
        }


def classify_errors(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> PrecisionResult:
    """Classify ``out ≈ x @ w.T`` (fp32 inputs) by the candidate it is closest to."""
    o = out.detach().to("cpu", torch.float64)
    xc, wc = x.detach().cpu().float(), w.detach().cpu().float()
    norm = (xc.double().abs() @ wc.double().abs().T).clamp(min=torch.finfo(torch.float64).tiny)
    errors: dict[str, float] = {}
    best, best_err, best_cls = "", float("inf"), IEEE
    for name, cls, bits, mode in _CANDIDATES:
        xr = xc if bits is None else round_mantissa(xc, bits, mode)
        wr = wc if bits is None else round_mantissa(wc, bits, mode)
        ref = xr.double() @ wr.double().T
        err = float(((o - ref).abs() / norm).median())
        errors[name] = err
        if err < best_err:
            best, best_err, best_cls = name, err, cls
    return PrecisionResult(best_cls, best, errors, {"M": x.shape[0], "N": w.shape[0], "K": x.shape[1]})


def classify_fp32_matmul(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: str | torch.device = "cpu",
    *,
    m: int = 64,
    n: int = 64,
    k: int = 512,
    seed: int = 0,
) -> PrecisionResult:
    """Run ``fn(x[m, k], w[n, k])`` on seeded normal fp32 inputs and classify its arithmetic.

    Normal inputs with random low mantissa bits make the candidates far apart:
    dropping 13 mantissa bits moves each product by ~1e-4 relative, while an
    IEEE fp32 sum of 512 terms errs by ~1e-7.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((m, k), generator=g, dtype=torch.float32)
    w = torch.randn((n, k), generator=g, dtype=torch.float32)
    out = fn(x.to(device), w.to(device))
    if out.dtype != torch.float32:
        raise TypeError(f"expected an fp32 result, got {out.dtype}")
    return classify_errors(out, x, w)
