"""Compare two outputs under a declared contract and describe the difference.

The default contract is ``bitwise`` (integer views equal). ``ulp<=k`` and
``tolerance(atol,rtol)`` exist for callers who declare them; whatever the
contract, the evidence always reports the raw bitwise difference too.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import torch

from .bits import bit_view, ulp_distance

BITWISE = "bitwise"
_ULP_RE = re.compile(r"^ulp<=(\d+)$")
_TOL_RE = re.compile(r"^tolerance\(\s*atol\s*=\s*([^,]+?)\s*,\s*rtol\s*=\s*([^)]+?)\s*\)$")


@dataclass(frozen=True)
class Contract:
    """What counts as 'the same'. Parsed from its printed form so records round-trip."""

    kind: str  # bitwise | ulp | tolerance
    ulp: int = 0
    atol: float = 0.0
    rtol: float = 0.0

    def __str__(self) -> str:
        if self.kind == "ulp":
            return f"ulp<={self.ulp}"
        if self.kind == "tolerance":
            return f"tolerance(atol={self.atol:g}, rtol={self.rtol:g})"
        return BITWISE


def parse_contract(text: str | Contract) -> Contract:
    if isinstance(text, Contract):
        return text
    s = text.strip()
    if s == BITWISE:
        return Contract("bitwise")
    m = _ULP_RE.match(s.replace(" ", ""))
    if m:
        return Contract("ulp", ulp=int(m.group(1)))
    m = _TOL_RE.match(s)
    if m:
        try:
            return Contract("tolerance", atol=float(m.group(1)), rtol=float(m.group(2)))
        except ValueError:
            pass
    raise ValueError(
        f"unknown contract {text!r}; expected 'bitwise', 'ulp<=K' or 'tolerance(atol=A, rtol=R)'"
    )


@dataclass(frozen=True)
class Comparison:
    """How two tensors differ. ``equal`` is judged under ``contract``."""

    equal: bool
    bitwise_equal: bool
    numel: int
    n_diff: int
    frac_diff: float
    max_ulp: float
    max_abs: float
    first_index: tuple[int, ...] | None
    contract: str

    def to_dict(self) -> dict:
        d = asdict(self)
        d["first_index"] = list(self.first_index) if self.first_index is not None else None
        if d["max_ulp"] == float("inf"):
            d["max_ulp"] = "inf"
        return d


def compare(a: torch.Tensor, b: torch.Tensor, contract: str | Contract = BITWISE) -> Comparison:
    """Compare ``a`` (reference) with ``b`` element by element."""
    c = parse_contract(contract)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise TypeError(f"dtype mismatch: {a.dtype} vs {b.dtype}")
    a = a.detach().cpu()
    b = b.detach().cpu()
    diff_mask = bit_view(a) != bit_view(b)
    n_diff = int(diff_mask.sum())
    numel = a.numel()
    if n_diff == 0:
        return Comparison(True, True, numel, 0, 0.0, 0.0, 0.0, None, str(c))
    first = tuple(int(i) for i in diff_mask.nonzero()[0].tolist())
    if a.is_floating_point():
        ulps = ulp_distance(a, b)
        max_ulp = float(ulps.max())
        fa, fb = a.to(torch.float64), b.to(torch.float64)
        absd = (fa - fb).abs()
        finite = torch.isfinite(absd)
        max_abs = float(absd[finite].max()) if bool(finite.any()) else float("inf")
    else:
        ulps = (a.to(torch.int64) - b.to(torch.int64)).abs().to(torch.float64)
        max_ulp = float(ulps.max())
        max_abs = max_ulp
        fa, fb = a.to(torch.float64), b.to(torch.float64)
    if c.kind == "bitwise":
        equal = False
    elif c.kind == "ulp":
        equal = max_ulp <= c.ulp
    else:
        equal = bool(torch.allclose(fa, fb, atol=c.atol, rtol=c.rtol, equal_nan=True))
    return Comparison(equal, False, numel, n_diff, n_diff / numel, max_ulp, max_abs, first, str(c))


def fingerprint(t: torch.Tensor) -> bytes:
    """Exact identity of a tensor's bits (for equivalence classes)."""
    t = t.detach().cpu().contiguous()
    return bytes(bit_view(t).numpy().tobytes()) + str(tuple(t.shape)).encode()
