"""Which arithmetic does an "fp32" matmul really use?

A kernel asked for fp32 may silently run TF32 (inputs cut to a 10-bit
mantissa) or a bf16 path on the tensor cores. That changes accuracy and, when
it depends on shape, invariance. The check multiplies ordinary fp32 inputs and
measures the error against the float64 product with absolute bounds per class,
never by picking the nearest candidate (which calls a bf16-rounded output
"IEEE" because every candidate is further away).

The error is the median of ``|out - x @ w.T| / (|x| @ |w|.T)`` (float64
reference), times ``sqrt(K)``: rounding the inputs to ``b`` mantissa bits errs
by about ``0.6 * 2**-b / sqrt(K)`` in that measure (measured on a 2-core AMD
EPYC: TF32 0.63 x 2^-11, bf16 0.62 x 2^-8, at K = 64, 512 and 4096), while an
IEEE fp32 sum stays near ``2**-22``. The class is the first whose bound the
scaled error is within: IEEE ``2**-18``, TF32-like ``2**-10.25``, bf16-like
``2**-7``; above that, "other" (worse than bf16). A switch that turns on with
size is caught by :func:`classify_fp32_matmul_sizes`, which measures several M.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

IEEE = "ieee-fp32"
TF32 = "tf32-like"
BF16 = "bf16-like"
OTHER = "other"  # worse than bf16
CLASSES = (IEEE, TF32, BF16, OTHER)  # best to worst
# Bounds on median(|out - exact| / (|x| @ |w|.T)) * sqrt(K), per class.
BOUNDS = {IEEE: 2.0**-18, TF32: 2.0**-10.25, BF16: 2.0**-7}
# Record quantization names for each class (docs/API.md vocabulary).
QUANTIZATION = {IEEE: "fp32-ieee", TF32: "fp32-tf32", BF16: "fp32-bf16", OTHER: "fp32-other"}

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
    scaled_error: float = 0.0  # median normalised error vs the exact product, times sqrt(K)
    by_m: dict[int, str] = field(default_factory=dict)  # class at each M (classify_fp32_matmul_sizes)

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
            "scaled_error": self.scaled_error,
            "bounds": {k: v for k, v in BOUNDS.items()},
            **({"by_m": {str(m): c for m, c in self.by_m.items()}} if self.by_m else {}),
        }


def classify_errors(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> PrecisionResult:
    """Classify ``out ≈ x @ w.T`` (fp32 inputs) by absolute error bounds (module docstring).

    The normalised error against each candidate arithmetic is kept as evidence, and the nearest
    candidate is named, but the class comes from the bounds alone."""
    o = out.detach().to("cpu", torch.float64)
    xc, wc = x.detach().cpu().float(), w.detach().cpu().float()
    norm = (xc.double().abs() @ wc.double().abs().T).clamp(min=torch.finfo(torch.float64).tiny)
    errors: dict[str, float] = {}
    best, best_err = "", float("inf")
    for name, _cls, bits, mode in _CANDIDATES:
        xr = xc if bits is None else round_mantissa(xc, bits, mode)
        wr = wc if bits is None else round_mantissa(wc, bits, mode)
        ref = xr.double() @ wr.double().T
        err = float(((o - ref).abs() / norm).median())
        errors[name] = err
        if err < best_err:
            best, best_err = name, err
    scaled = errors["exact"] * math.sqrt(x.shape[1])
    cls = next((c for c in (IEEE, TF32, BF16) if scaled <= BOUNDS[c]), OTHER)
    return PrecisionResult(cls, best, errors, {"M": x.shape[0], "N": w.shape[0], "K": x.shape[1]}, scaled)


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


def classify_fp32_matmul_sizes(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: str | torch.device = "cpu",
    *,
    ms: tuple[int, ...] = (16, 64, 1024),
    n: int = 64,
    k: int = 512,
    seed: int = 0,
) -> PrecisionResult:
    """The worst class over several M (a kernel may switch to TF32 only for large batches)."""
    results = {m: classify_fp32_matmul(fn, device, m=m, n=n, k=k, seed=seed + i) for i, m in enumerate(ms)}
    worst = max(results.values(), key=lambda r: (CLASSES.index(r.precision_class), r.scaled_error))
    worst.by_m = {m: r.precision_class for m, r in results.items()}
    return worst
