"""What the launch census says about one op call: routed to a reference kernel, exact, or unrouted.

Why these four words: a reader of an engine's census needs to see at a glance which ops ran
outside the invariant kernels. ``reference``: ``enable()`` routed the call and the reference
kernel computed it. ``declined``: the op is routed but the reference does not cover this call
(an integer matmul, an SDPA mask it does not take), so the stock kernel ran. ``exact``: the op
cannot round differently with the batch (it moves bits, selects, compares, or is one correctly
rounded IEEE operation per element, the same in ATen's vector and scalar loops). ``unrouted``:
everything else, custom ops (``torch.ops.<ns>.*`` outside ``aten``) included: an op that may
round with the batch and has no reference. Unknown ops are ``unrouted``, never skipped.
Imports no torch at import time, so the CLI stays light; the localize modules it
shares names with (and torch) load on first use.
"""

from __future__ import annotations

REFERENCE, DECLINED, EXACT, UNROUTED = "reference", "declined", "exact", "unrouted"
STATUSES = (UNROUTED, DECLINED, REFERENCE, EXACT)  # the report's order: what needs work first

# routed aten op (as mode.ROUTED_OPS / CPU_ONLY_OPS name it) -> (family, reference implementation)
ROUTE_TARGETS: dict[str, tuple[str, str]] = {
    "mm": ("matmul", "matmul.mm"), "addmm": ("matmul", "matmul.addmm"), "bmm": ("matmul", "matmul.bmm"),
    "_log_softmax": ("softmax", "rowops.log_softmax"), "mean.dim": ("mean", "rowops.mean"),
    "rms_norm": ("rmsnorm", "rowops.rms_norm"),
    "scaled_dot_product_attention": ("attention-prefill", "attention.sdpa"),
    **{op: ("int4-gemm", "int4.int4pack_mm") for op in ("_weight_int4pack_mm", "_weight_int4pack_mm_for_cpu")},
    **{op: ("elementwise", "lanewise") for op in
       ("silu", "sigmoid", "exp", "log", "tanh", "cos", "sin", "rsqrt", "erf", "gelu")},
}  # fmt: skip

# One correctly rounded IEEE operation per element (or none): the vector and scalar loops agree.
_EXACT_MATH = frozenset(
    """add sub rsub mul div neg abs sqrt reciprocal eq ne lt le gt ge logical_and logical_or logical_not
    logical_xor bitwise_and bitwise_or bitwise_xor bitwise_not where clamp clamp_min clamp_max maximum
    minimum relu max min amax amin argmax argmin topk sort argsort any all isnan isinf isfinite floor ceil
    round trunc sign triu tril _to_copy to arange full full_like zeros ones empty empty_strided scalar_tensor
    _local_scalar_dense masked_select nonzero scatter scatter_ index_copy index_copy_ _unsafe_index
    bucketize searchsorted eye lift_fresh_copy resize_ set_ sym_size sym_stride sym_numel _assert_async
    fill _unsafe_view masked_fill masked_scatter""".split()
)
_EXACT_POW = (0.5, 1, 1.0, 2, 2.0, 3, 3.0, -1, -1.0)  # ATen: sqrt, copy, x*x, x*x*x, reciprocal


def routed_name(name: str) -> str | None:
    """The routed-op key (``mm``, ``mean.dim``) of an ``aten.<op>.<overload>`` name, else None."""
    parts = name.split(".")
    if len(parts) < 2 or parts[0] != "aten":
        return None
    overload = parts[2] if len(parts) > 2 else "default"
    key = parts[1] if overload == "default" else f"{parts[1]}.{overload}"
    return key if key in ROUTE_TARGETS else None


def is_exact(name: str, args: tuple = (), kwargs: dict | None = None) -> bool:
    """Whether an op's bits cannot depend on what shares its tensors (see the module docstring)."""
    if not name.startswith("aten."):
        return False
    from pytest_invariance.localize.rows import DATA_MOVEMENT

    p = name.split(".")[1]
    base = p[:-1] if p.endswith("_") and not p.startswith("_") else p  # in place: the same math
    if base in DATA_MOVEMENT or p in DATA_MOVEMENT:
        return True
    kwargs = kwargs or {}
    if base in ("add", "sub") and kwargs.get("alpha", 1) != 1:
        return False  # a + alpha*b: one fused rounding in the vector loop, two in the scalar one
    if base == "pow":
        return name.endswith("Tensor_Scalar") and len(args) > 1 and args[1] in _EXACT_POW
    return base in _EXACT_MATH or p in _EXACT_MATH


def status_of(name: str, args: tuple = (), kwargs: dict | None = None, declined: bool = False) -> str:
    """``reference`` / ``declined`` / ``exact`` / ``unrouted`` of one call (``declined``: what
    ``mode.declined()`` said right after a routed call)."""
    if routed_name(name) is not None:
        return DECLINED if declined else REFERENCE
    return EXACT if is_exact(name, args, kwargs) else UNROUTED


def maps_to(name: str, status: str) -> tuple[str, str]:
    """(family, implementation) of an op's calls with ``status``: what a census row maps to."""
    key = routed_name(name)
    if key is not None:
        family, impl = ROUTE_TARGETS[key]
        return family, (f"reference ({impl})" if status == REFERENCE else "torch (the reference declined)")
    ns = name.split(".")[0]
    if ns != "aten":
        return "-", f"custom op ({ns})"
    from pytest_invariance.localize.census_ops import family_of

    fam = family_of(name)
    return ("-" if fam == name else fam), ("torch (exact)" if status == EXACT else "torch")

