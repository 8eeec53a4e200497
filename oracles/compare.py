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
    numel = a.numel()
    a, b = a.detach(), b.detach()
    if a.device != b.device:
        a, b = a.cpu(), b.cpu()
    # Everything is computed where the tensors live; only scalars reach the host.
    # (Diff statistics of a divergent control's whole-batch outputs, taken on the
    # host, once dominated the GPU suites' run time.)
    if torch.equal(bit_view(a), bit_view(b)):
        return Comparison(True, True, numel, 0, 0.0, 0.0, 0.0, None, str(c))
    diff_mask = bit_view(a) != bit_view(b)
    n_diff = int(diff_mask.sum())
    first_flat = torch.argmax(diff_mask.reshape(-1).to(torch.uint8))  # first maximal value: first difference
    first = tuple(int(i) for i in torch.unravel_index(first_flat, tuple(a.shape))) if a.dim() else ()
    # Statistics over the differing elements only (equal ones contribute 0 to every one of them):
    # a divergent whole-batch output stays within a few copies of its differing part.
    da, db = a[diff_mask], b[diff_mask]
    if a.is_floating_point():
        max_ulp = float(ulp_distance(da, db).max())
        absd = (da.to(torch.float64) - db.to(torch.float64)).abs()
        finite = torch.isfinite(absd)
        max_abs = float(absd[finite].max()) if bool(finite.any()) else float("inf")
    else:
        max_ulp = float((da.to(torch.int64) - db.to(torch.int64)).abs().max())
        max_abs = max_ulp
    if c.kind == "bitwise":
        equal = False
    elif c.kind == "ulp":
        equal = max_ulp <= c.ulp
    else:
        fa, fb = da.to(torch.float64), db.to(torch.float64)
        equal = bool(torch.allclose(fa, fb, atol=c.atol, rtol=c.rtol, equal_nan=True))
    return Comparison(equal, False, numel, n_diff, n_diff / numel, max_ulp, max_abs, first, str(c))


class BitsKey:
    """Hashable, exact identity of a tensor's bits, kept on the tensor's device.

    Equivalence classes group outputs by identical bits. Copying each output to
    the host to hash its bytes dominated GPU suites with large outputs; this key
    hashes a cheap on-device digest and settles equality with an exact bitwise
    comparison, so a digest collision can never merge two different outputs.
    """

    __slots__ = ("_bits", "_hash")

    def __init__(self, t: torch.Tensor) -> None:
        bits = bit_view(t.detach()).clone()
        self._bits = bits
        digest = int(bits.to(torch.int64).sum()) if bits.numel() else 0
        self._hash = hash((digest, tuple(bits.shape), bits.dtype))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BitsKey):
            return NotImplemented
        a, b = self._bits, other._bits
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.device != b.device:
            b = b.to(a.device)
        return torch.equal(a, b)
