"""Reference Triton matmul: no split-K, K accumulated in one fixed order per output tile.

Why it is batch-invariant
-------------------------
Every output element ``C[m, n]`` is owned by exactly one program, which walks
K from 0 upward in steps of ``BLOCK_K`` and feeds each step into one fp32
accumulator (``acc = dot(a_k, b_k, acc)``). Nothing else ever touches that
element, so its rounding sequence is fixed by K, ``BLOCK_K`` and the MMA
instruction, and not by M.

The tile *configuration* does depend on M, by shape class: ``M <= 64`` is
decode (small tiles, many programs); above it a large 128x256 tile for
throughput. On Hopper with 16-bit inputs the class above 64 rows is split in
two at the "two-wave edge" (where ``cdiv(M, 128) * cdiv(N, 256)`` reaches
twice the SM count: M = 2049 for a 4096-wide layer on 132 SMs, 257 for
28672): 128x128 persistent tiles below it, 128x256 tiles from it, both fed by
the TMA unit (``_mm_tma_kernel``). That is safe because the classes share
what fixes an element's rounding sequence:

* the same K order, so the same chain of partial dots into the accumulator.
  fp32, and every dtype off Hopper, also keep the same ``BLOCK_K`` in both
  classes. On Hopper the 16-bit decode class uses a larger ``BLOCK_K`` (128 or
  256): a ``BLOCK_K`` tile is itself a chain of k=16 warpgroup MMAs into the
  same accumulator, so the chain is unchanged; measured bit-identical to the
  large class on the H200 for every Llama-3-8B layer (``bench_gemm.py
  --sweep-decode``), and re-checked on every run by the suites at 64 vs 65;
* the same instruction family: both classes use ``BLOCK_M >= 64`` with a
  multiple of 4 warps, so on Hopper both lower to warpgroup MMA (wgmma,
  k=16 per instruction, chained through the accumulator in K order); below
  that Triton would fall back to ``mma.sync``, whose internal summation is
  not documented to match. fp32 uses ``input_precision="ieee"``, which is an
  FMA loop over k per element in any layout.

``BLOCK_M`` and ``BLOCK_N`` only decide which program owns an element and
which rows share a tile; rows beyond M load zeros and are never stored, and a
zero-padded K tail adds exact zeros; TMA tiles and masked pointer loads bring
the same values. The GPU suites verify the claim rather than trusting this
paragraph: the batch-size oracle compares a row alone (decode class) with the
same row in batches of every class (the full profile reaches 2049 rows), and
``tests/test_matmul_kernels.py`` compares the TMA and pointer kernels, both B
layouts and the bias epilogue, on each side of the edges.

Config choice may use N, K, dtype and the device's SM count (all fixed for a
given layer on a given GPU), and M only through these classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._tile_triton import grouped_tile
from .device import cdiv, sm_count
from .interpreted import kernel_for
from .interpreter_dot import install as _install_interpreter_dot
from .launch import Launcher, aligned

_install_interpreter_dot()  # CPU tests measure the kernel, not numpy's BLAS (see interpreter_dot)

SMALL_M = 64  # rows at or below this use the decode class


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    tma: bool = False  # tiles fetched by TMA (Hopper, 16-bit, layouts TMA can read)
    persistent: bool = False  # one program per SM walking the tiles (TMA kernel only)


# BLOCK_K is the same in both classes of a dtype (see the module docstring).
_LARGE = {
    torch.bfloat16: TileConfig(128, 256, 64, 8, 8, 3),
    torch.float16: TileConfig(128, 256, 64, 8, 8, 3),
    torch.float32: TileConfig(128, 128, 32, 8, 8, 3),
}
_HOPPER_LARGE = TileConfig(128, 256, 64, 8, 8, 3, tma=True)
_HOPPER_MEDIUM = TileConfig(128, 128, 64, 8, 8, 5, tma=True, persistent=True)
_SMALL_BLOCK_K = {torch.bfloat16: 64, torch.float16: 64, torch.float32: 32}
# Under the interpreter (CPU tests) one small config keeps numpy's per-block
# matmul on a single shape; speed is irrelevant there.
_INTERPRET = {
    torch.bfloat16: TileConfig(16, 16, 16, 1, 4, 1),
    torch.float16: TileConfig(16, 16, 16, 1, 4, 1),
    torch.float32: TileConfig(16, 16, 16, 1, 4, 1),
}

DTYPES = tuple(_LARGE)


def _hopper(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device)[0] == 9


def pick_config(
    m: int, n: int, k: int, dtype: torch.dtype, device: torch.device, interpret: bool
) -> TileConfig:
    """The tile config for a problem: by dtype, by M *class*, and by N (never by M within a class)."""
    if dtype not in _LARGE:
        raise TypeError(f"reference matmul supports {', '.join(map(str, DTYPES))}, got {dtype}")
    if interpret:
        return _INTERPRET[dtype]
    sms = sm_count(device)
    if m > SMALL_M:
        if dtype == torch.float32 or not _hopper(device):
            return _LARGE[dtype]
        # Hopper, 16-bit: TMA-fed tiles (bits equal to the pointer kernel's, see
        # _mm_tma_kernel); 128x128 persistent while 128x256 tiles would not fill
        # two waves of the SMs (prefill-sized M), 128x256 above. Chosen by
        # ``bench_gemm.py --sweep-large`` on the H200.
        if cdiv(m, 128) * cdiv(n, 256) >= 2 * sms:
            return _HOPPER_LARGE
        return _HOPPER_MEDIUM
    if dtype == torch.float32 or not _hopper(device):
        # Decode class with the large class's BLOCK_K: spread N over >= 2 programs per SM.
        block_n = 128
        while block_n > 16 and cdiv(n, block_n) < 2 * sms:
            block_n //= 2
        stages = 4 if dtype == torch.float32 else 5
        return TileConfig(64, block_n, _SMALL_BLOCK_K[dtype], 1, 4, stages)
    # Hopper, 16-bit: memory-bound, so what matters is bytes in flight per SM. A
    # larger BLOCK_K keeps the same chain of k=16 warpgroup MMAs into the
    # accumulator, in the same K order: measured bit-identical to the large class
    # on the H200 (bench_gemm.py --sweep-decode) and checked by the suites at 64 vs 65.
    block_n = 64
    while block_n > 16 and cdiv(n, block_n) < sms // 2:
        block_n //= 2
    if cdiv(n, block_n) >= 2 * sms:
        return TileConfig(64, block_n, 64, 1, 4, 6)  # many programs already: shallow tiles, deep pipeline
    if block_n == 64:
        return TileConfig(64, 64, 128, 1, 4, 6)
    return TileConfig(64, block_n, 256, 1, 4, 4)  # few programs: the widest K tile that fits


@triton.jit
def tile_sum(a_ptrs, b_ptrs, offs_k, mask_m, mask_n, K, stride_ak, stride_bk, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr):  # fmt: skip
    """One output tile's fp32 sum: K walked upward in ``BLOCK_K`` steps, each dot fed into the one
    accumulator (the invariance argument above); the K tail loads zeros, which add exactly.
    ``UPCAST`` widens both tiles to fp32 first (the interpreter's bf16); ``INPUT_PRECISION`` None
    is ``tl.dot``'s default."""
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, dtype=tl.float32)
    for kk in range(0, (K + BLOCK_K - 1) // BLOCK_K):
        k_left = K - kk * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_m & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def _mm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    bias_ptr,
    M,
    N,
    K,
    stride_az,
    stride_am,
    stride_ak,
    stride_bz,
    stride_bk,
    stride_bn,
    stride_cz,
    stride_cm,
    stride_cn,
    stride_biasz,
    stride_biasm,
    stride_biasn,
    alpha,
    beta,
    HAS_BIAS: tl.constexpr,
    SCALE: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    z = tl.program_id(1)
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    pid_m, pid_n = grouped_tile(tl.program_id(0), num_pid_m, GROUP_M * num_pid_n, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + z * stride_az + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + z * stride_bz + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    mask_m = offs_m[:, None] < M
    mask_n = offs_n[None, :] < N

    acc = tile_sum(a_ptrs, b_ptrs, offs_k, mask_m, mask_n, K, stride_ak, stride_bk, BLOCK_M, BLOCK_N, BLOCK_K,
                   UPCAST, INPUT_PRECISION)  # fmt: skip
    if SCALE:
        acc = acc * alpha
    if HAS_BIAS:
        bias_ptrs = (
            bias_ptr + z * stride_biasz + offs_m[:, None] * stride_biasm + offs_n[None, :] * stride_biasn
        )
        bias = tl.load(bias_ptrs, mask=mask_m & mask_n, other=0.0).to(tl.float32)
        if SCALE:
            bias = bias * beta
        acc = acc + bias
    c_ptrs = c_ptr + z * stride_cz + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m & mask_n)


@triton.jit
def _mm_tma_kernel(
    a_desc,
    b_desc,
    c_ptr,
    bias_ptr,
    M,
    N,
    K,
    stride_cm,
    stride_cn,
    stride_biasm,
    stride_biasn,
    alpha,
    beta,
    HAS_BIAS: tl.constexpr,
    SCALE: tl.constexpr,
    B_KMAJOR: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """The same per-element sum as ``_mm_kernel``, with tiles fetched by the TMA unit.

    The descriptors zero-fill out-of-bounds reads (the K tail adds exact zeros,
    as the masked loads do), so every element sees the same chain of k-steps
    into its fp32 accumulator. ``B_KMAJOR``: B is given as W[N, K] (a linear
    layer's weight) and each tile is transposed in shared memory. A persistent
    grid (fewer programs than tiles, each walking the tiles in launch order)
    only changes which program computes a tile, never a tile's arithmetic.
    """
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    num_in_group = GROUP_M * num_pid_n
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_in_group, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.full((BLOCK_M, BLOCK_N), 0.0, dtype=tl.float32)
        for kk in range(0, (K + BLOCK_K - 1) // BLOCK_K):
            a = a_desc.load([off_m, kk * BLOCK_K])
            if B_KMAJOR:
                b = b_desc.load([off_n, kk * BLOCK_K]).T
            else:
                b = b_desc.load([kk * BLOCK_K, off_n])
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        offs_m = (off_m + tl.arange(0, BLOCK_M)).to(tl.int64)  # M*N may pass 2**31 (lm_head)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        # The epilogue of ``_mm_kernel`` for one batch, its rows in int64.
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        if SCALE:
            acc = acc * alpha
        if HAS_BIAS:
            bias = tl.load(
                bias_ptr + offs_m[:, None] * stride_biasm + offs_n[None, :] * stride_biasn, mask=mask, other=0.0
            ).to(tl.float32)
            if SCALE:
                bias = bias * beta
            acc = acc + bias
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
                 acc.to(c_ptr.dtype.element_ty), mask=mask)  # fmt: skip


def _tma_rows(t: torch.Tensor) -> bool:
    """A 2-D 16-bit operand TMA can read as rows: unit inner stride, 16-byte aligned rows and base."""
    return (
        t.stride(1) == 1
        and t.stride(0) >= max(1, t.shape[1])  # rows that do not overlap (no broadcast)
        and (t.stride(0) * t.element_size()) % 16 == 0
        and t.data_ptr() % 16 == 0
    )


def _tma_layout(a: torch.Tensor, b: torch.Tensor) -> bool | None:
    """``B_KMAJOR`` if the TMA kernel can read these operands, else None.

    TMA needs one batch, a unit stride in each operand's last dimension and
    16-byte aligned base and row strides. The choice depends on layout only,
    never on M; both kernels give the same bits (checked by ``bench_gemm.py
    --sweep-large`` and by the suites across the class edges).
    """
    if a.shape[0] != 1 or a.element_size() != 2 or a.shape[2] == 0 or not _tma_rows(a[0]):
        return None
    if _tma_rows(b[0].t()):
        return True  # B given as W[N, K], a linear layer's weight
    if _tma_rows(b[0]):
        return False
    return None


def _interpreting(device: torch.device) -> bool:
    return device.type != "cuda"


def _descriptors(a2: torch.Tensor, b2: torch.Tensor, kmajor: bool, cfg: TileConfig):
    """The TMA descriptors of A and B (zero padding past the edges)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    a_desc = TensorDescriptor(a2, a2.shape, a2.stride(), [cfg.block_m, cfg.block_k])
    if kmajor:
        bt = b2.t()
        return a_desc, TensorDescriptor(bt, bt.shape, bt.stride(), [cfg.block_n, cfg.block_k])
    return a_desc, TensorDescriptor(b2, b2.shape, b2.stride(), [cfg.block_k, cfg.block_n])


_launchers: dict = {}


def _launcher(kernel) -> Launcher:
    got = _launchers.get(kernel)
    if got is None:
        got = _launchers[kernel] = Launcher(kernel)
    return got


@dataclass(frozen=True)
class _Plan:
    """What one (shapes, strides, dtype, alignment) class of call launches: decided once."""

    cfg: TileConfig
    kmajor: bool | None  # TMA kernel (B_KMAJOR) or None for the pointer kernel
    grid: tuple[int, ...]
    constexprs: tuple[tuple[str, object], ...]
    options: tuple[tuple[str, int], ...]


_plans: dict = {}
_MAX_PLANS = 4096


def _plan(a: torch.Tensor, b: torch.Tensor, has_bias: bool, scale: bool, config: TileConfig | None) -> _Plan:
    zdim, m, k = a.shape
    n = b.shape[2]
    interpret = _interpreting(a.device)
    cfg = config or pick_config(m, n, k, a.dtype, a.device, interpret)
    kmajor = _tma_layout(a, b) if cfg.tma else None
    tiles = cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n)
    # The interpreter keeps bf16 as raw uint16 and its dot would multiply the bits:
    # widen first (bf16 products are exact in fp32, as in the tensor core).
    upcast = interpret and a.dtype == torch.bfloat16
    blocks = {"UPCAST": upcast, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k,
              "GROUP_M": cfg.group_m}  # fmt: skip
    options = () if interpret else (("num_warps", cfg.num_warps), ("num_stages", cfg.num_stages))
    if kmajor is not None:
        # Persistent: one program per SM (two under the interpreter, so tests walk the loop).
        progs = min(tiles, sm_count(a.device) if a.is_cuda else 2) if cfg.persistent else tiles
        consts = {"HAS_BIAS": has_bias, "SCALE": scale, "B_KMAJOR": kmajor, **blocks}
        return _Plan(cfg, kmajor, (progs,), tuple(consts.items()), options)
    consts = {"HAS_BIAS": has_bias, "SCALE": scale,
              # fp32 must be IEEE, never TF32; for 16-bit inputs the setting is ignored by tl.dot.
              "INPUT_PRECISION": "ieee" if a.dtype == torch.float32 else "tf32", **blocks}  # fmt: skip
    return _Plan(cfg, None, (tiles, zdim), tuple(consts.items()), options)


def bmm_triton(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    config: TileConfig | None = None,
) -> torch.Tensor:
    """``alpha * a[Z, M, K] @ b[Z, K, N] + beta * bias`` (bias broadcastable to [Z, M, N]).

    Any strides are accepted (``b`` may be a transposed weight view), so
    ``linear`` never copies the weight. ``config`` overrides the fixed tile
    config: for benchmarks comparing candidates only, never for results.

    Host work per call is one plan lookup by (shapes, strides, dtype, alignment) and the
    kernel's direct launch (``launch.Launcher``): the tile config, the grid and the JIT's
    specialization are computed once per class of call, not per call.
    """
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ValueError(f"expected a[Z, M, K] and b[Z, K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise TypeError(f"dtype mismatch: {a.dtype} vs {b.dtype}")
    zdim, m, k = a.shape
    n = b.shape[2]
    alpha, beta = float(alpha), float(beta)
    interpret = _interpreting(a.device)
    scale = alpha != 1 or beta != 1
    key = None
    if not interpret and config is None:
        bkey = None if bias is None else (bias.shape, bias.stride(), bias.dtype)
        key = (a.shape, a.stride(), b.shape, b.stride(), a.dtype, a.device.index, bkey, scale, *aligned(a, b, bias))
    plan = _plans.get(key) if key is not None else None
    if plan is None:
        plan = _plan(a, b, bias is not None, scale, config)
        if key is not None and len(_plans) < _MAX_PLANS:  # past the cap (unbounded shapes): planned each call
            _plans[key] = plan
    # The interpreter's fp32->bf16 cast does not round to nearest even as the GPU
    # does: under it, bf16 results are stored as fp32 and rounded by torch.
    widen_out = interpret and a.dtype == torch.bfloat16
    c = torch.empty((zdim, m, n), dtype=torch.float32 if widen_out else a.dtype, device=a.device)
    if m == 0 or n == 0 or zdim == 0:
        return c.to(a.dtype)
    if bias is not None:
        bias_v = bias.expand(zdim, m, n) if bias.dim() <= 3 else bias
        bstrides = bias_v.stride()
    else:
        bias_v, bstrides = c, (0, 0, 0)
    consts, options = dict(plan.constexprs), dict(plan.options)
    if plan.kmajor is not None:
        kernel, _ = kernel_for(_mm_tma_kernel, a.device)
        a_desc, b_desc = _descriptors(a[0], b[0], plan.kmajor, plan.cfg)
        args = (a_desc, b_desc, c, bias_v, m, n, k, c.stride(1), c.stride(2), bstrides[1], bstrides[2], alpha, beta)
    else:
        kernel, _ = kernel_for(_mm_kernel, a.device)
        args = (a, b, c, bias_v, m, n, k, *a.stride(), *b.stride(), *c.stride(), *bstrides, alpha, beta)
    _launcher(kernel).launch(key, plan.grid, args, consts, options)
    return c.to(a.dtype) if widen_out else c
