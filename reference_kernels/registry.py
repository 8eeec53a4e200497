"""Which implementations exist for each kernel family, and what each must show.

The shipped suites iterate over this registry, so a kernel author gets their
kernel tested by registering it, either with a call in a conftest.py::

    from pytest_invariance.reference_kernels.registry import register
    register("matmul", "mylib", my_linear)           # fn(x[M, K], w[N, K]) -> [M, N]

or, for an installed package, through the entry point group
``pytest_invariance.kernels`` whose object is a zero-argument callable that
performs the ``register`` calls. A registered kernel is expected to be
``invariant`` unless registered with another ``expect``.

Call signatures per family (rows on dim 0 are the batch):

- ``matmul``: ``fn(x[M, K], w[N, K]) -> x @ w.T`` of x's dtype
- ``fp8-gemm``: ``fn(x[M, K] float, w_fp8[N, K], w_scale, x_scale=None) -> bf16 [M, N]``; the kernel
  quantizes the activation itself, per token when ``x_scale`` is None, with the static per-tensor
  ``x_scale`` otherwise; a ``fn.quantization`` attribute names what it does (default ``fp8-e4m3``)
- ``rmsnorm``: ``fn(x[M, H], weight[H], eps) -> [M, H]``
- ``softmax``: ``fn(x[M, V]) -> log_softmax(x, -1)``; ``mean``: ``fn(x[M, V]) -> x.mean(-1)``
- ``add-rmsnorm``: ``fn(x[M, H], residual[M, H], weight[H], eps) -> (x, residual)``, in place
- ``rmsnorm-fp8-quant``: ``fn(x[M, H], weight[H], eps, scale=None) -> (q e4m3 [M, H], scale)``
- ``fp8-block-gemm``: ``fn(x[M, K], w_fp8[N, K], w_scale[N/128, K/128]) -> bf16 [M, N]``
- ``int4-gemm``: ``fn(x[M, K], qweight int32[K/8, N], scales[K/128, N], qzeros int32[K/128, N/8])``
- ``lora``: ``fn(x[M, H], base[M, N], lora_a[L, R, H], lora_b[L, N, R], ids[M], scale) -> [M, N]``
- ``linear-attention``: ``fn(q, k, v, g, state=None) -> (o, state)`` (rows are sequences)
- attention and MoE families document their signatures in their own modules; the six above in
  ``fused_norm``, ``fp8_block``, ``int4``, ``lora`` and ``linear_attention``
  (docs/guide/kernel-families.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

ROLES = ("stock", "reference", "mutant", "registered")
ENTRY_POINT_GROUP = "pytest_invariance.kernels"


@dataclass(frozen=True)
class Kernel:
    """One implementation of a family, and the verdict the suites demand of it."""

    family: str
    name: str
    fn: Callable
    role: str = "registered"
    expect: str = "invariant"  # invariant | divergent | measure
    devices: tuple[str, ...] = ("cpu", "cuda")
    description: str = ""
    # Per-oracle exceptions to ``expect``, e.g. (("batch-position", "measure"),) for a mutant whose
    # mechanism keys on M alone, so one probe row rarely shows it; stated, never inferred.
    oracle_expect: tuple[tuple[str, str], ...] = ()


_REGISTRY: dict[tuple[str, str], Kernel] = {}
_entry_points_loaded = False

_DEFAULT_EXPECT = {"stock": "measure", "reference": "invariant", "mutant": "divergent", "registered": "invariant"}


def register(
    family: str,
    name: str,
    fn: Callable,
    *,
    role: str = "registered",
    expect: str | None = None,
    devices: tuple[str, ...] = ("cpu", "cuda"),
    description: str = "",
    oracle_expect: dict[str, str] | None = None,
) -> Kernel:
    """Add (or replace) an implementation of ``family`` under ``name``."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    exp = expect or _DEFAULT_EXPECT[role]
    for e in (exp, *(oracle_expect or {}).values()):
        if e not in ("invariant", "divergent", "measure"):
            raise ValueError(f"unknown expect {e!r}; expected invariant, divergent or measure")
    k = Kernel(family, name, fn, role, exp, tuple(devices), description, tuple(sorted((oracle_expect or {}).items())))
    _REGISTRY[(family, name)] = k
    return k


def unregister(family: str, name: str) -> None:
    _REGISTRY.pop((family, name), None)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()()


def kernels(family: str, device: str | None = None) -> list[Kernel]:
    """Implementations of ``family`` (optionally only those that run on ``device``), by name."""
    _load_entry_points()
    out = [k for (fam, _), k in _REGISTRY.items() if fam == family]
    if device is not None:
        out = [k for k in out if device in k.devices]
    return sorted(out, key=lambda k: (ROLES.index(k.role), k.name))
