"""All-reduce: does a row's reduced value depend on its message, or on how many ranks reduced it?

Family ``allreduce``, every implementation in the registry that runs on CPU (stock gloo
``all_reduce``, gloo reduce-scatter + all-gather, the fixed-order reference, the size-chunked ring
mutant, any kernel registered as ``fn(parts[p, M, H], group) -> [M, H]``) x bf16/fp32 x oracles
batch-size, batch-position, run-to-run (all at 4 ranks: with 2, the one addition per element is
commutative and nothing can diverge) and world-size (one global ``[4, M, H]`` over 1, 2, 4 ranks).

The ranks are real: one pool of 4 spawned processes in a gloo group on 127.0.0.1 per module (and
per xdist worker; the module is one xdist group), with subgroups for TP1 and TP2, stopped at the
end. Every call is bounded (``CALL_TIMEOUT_S``): a rank that stalls makes the check ``incomplete``.
Reference: ``invariant``; stock: measured; mutant: ``divergent``. Controls:
``mutant:ring-channels`` (batch and world-size oracles) and the same ring with its rotation bumped
per call (run-to-run).

CUDA (marked ``gpu``): every CUDA row (stock NCCL under each named configuration of
``collectives.nccl_configs``, symmetric memory, the reference, the ring) at hidden 4096, on NCCL
ranks, one per GPU, one pool per configuration (NCCL reads its environment once per process).
The batch oracles run at the largest of 1, 2, 4, 8 ranks the host has, the world-size oracle over
all of those (``unsupported`` with one GPU). Below 3 ranks each element is at most one addition,
which commutes, so nothing can diverge: the ring control cannot either, every verdict there is
``vacuous`` (or ``divergent``, which would be a finding) and is only measured, with the reason in
``extra.vacuous_by_construction``. Never ``invariant``: that needs a control that diverged.
"""

from __future__ import annotations

import pytest
from pytest_invariance.oracles.vocabulary import OP_ORACLES, QUANTIZATION_OF_DTYPE, WORLD_SIZE

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.family("allreduce"), pytest.mark.xdist_group("invariance-allreduce")]

WORLD = 4  # batch oracles run here; also the number of global parts of the world-size oracle
WORLD_SIZES = [1, 2, 4]
H = 128  # a small hidden size: CI is 2 cores, and the ring's chunking shows at any width
DTYPES = ("bfloat16", "float32")
# Sizes around the ring's chunk and channel edges (bf16: 1 channel under 16 rows, 2 under 64).
SIZES = [1, 2, 3, 4, 7, 8, 9, 16, 17, 32, 33]
POSITION_SIZES = [3, 9, 33]  # 5 positions each: the position oracle is the costly one
CALL_TIMEOUT_S = 30.0
ORACLES = (*OP_ORACLES, WORLD_SIZE)
CONTROL = "mutant:ring-channels"
# CUDA: Llama-3-8B's hidden size; sizes cross NCCL's protocol and channel thresholds (8 KiB .. 2 MiB)
CUDA_H = 4096
CUDA_SIZES = [1, 2, 3, 4, 7, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129, 256]
CUDA_POSITION_SIZES = [3, 9, 33, 129]
CUDA_WORLDS = (1, 2, 4, 8)
CUDA_CALL_TIMEOUT_S = 60.0  # a subgroup's first NCCL call builds its communicator
MIN_DIVERGENT_WORLD = 3  # with 1 or 2 ranks an element is at most one (commutative) addition


def _kernels(device: str = "cpu"):
    from pytest_invariance.reference_kernels.catalogue import register_builtin
    from pytest_invariance.reference_kernels.registry import kernels

    register_builtin("collectives")
    return kernels("allreduce", device)


def _cuda_names() -> list[str]:
    """The CUDA rows, and symmetric memory even where torch lacks it (recorded ``unsupported``)."""
    from pytest_invariance.reference_kernels.collectives.symm_mem import NAME

    names = [k.name for k in _kernels("cuda")]
    return names if NAME in names else [NAME, *names]


def _params() -> list:
    cpu = [
        pytest.param("cpu", k.name, dt, oracle, marks=pytest.mark.quant(QUANTIZATION_OF_DTYPE[dt]),
                     id=f"cpu-{k.name}-H{H}-{QUANTIZATION_OF_DTYPE[dt]}-{oracle}")  # fmt: skip
        for k in _kernels()
        for dt in DTYPES
        for oracle in ORACLES
    ]
    cuda = [
        pytest.param("cuda", name, dt, oracle, marks=[pytest.mark.gpu, pytest.mark.quant(QUANTIZATION_OF_DTYPE[dt])],
                     id=f"cuda-{name}-H{CUDA_H}-{QUANTIZATION_OF_DTYPE[dt]}-{oracle}")  # fmt: skip
        for name in _cuda_names()
        for dt in DTYPES
        for oracle in ORACLES
    ]
    return cpu + cuda


def _cuda_worlds() -> list[int]:
    return [w for w in CUDA_WORLDS if w <= torch.cuda.device_count()]


@pytest.fixture(scope="module")
def ranks():
    """One pool of ``WORLD`` gloo ranks for the module; restarted if a check closed it."""
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    from pytest_invariance.reference_kernels.collectives.group import RankPool

    pool = RankPool(WORLD, WORLD_SIZES, call_timeout=CALL_TIMEOUT_S)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def nccl_pools():
    """NCCL ranks by configuration name, started on first use (one GPU per rank), all closed at the end."""
    from pytest_invariance.reference_kernels.collectives.group import RankPool
    from pytest_invariance.reference_kernels.collectives.nccl_configs import config

    pools: dict = {}

    def get(name: str) -> RankPool:
        pool = pools.get(name)
        if pool is None:
            worlds = _cuda_worlds()
            pool = pools[name] = RankPool(max(worlds), worlds, call_timeout=CUDA_CALL_TIMEOUT_S, backend="nccl",
                                          env=config(name).environment())  # fmt: skip
        elif pool.closed is not None:  # an earlier check stalled or raised: fresh ranks for this one
            pool.restart()
        return pool

    yield get
    for pool in pools.values():
        pool.close()


def _unsupported(invariance, name: str, dtype_name: str, oracle: str, reason: str, shape: dict) -> None:
    from pytest_invariance.oracles.verdict import UNSUPPORTED

    invariance.record(verdict=UNSUPPORTED, family="allreduce", implementation=name, oracle=oracle,
                      quantization=QUANTIZATION_OF_DTYPE[dtype_name], dtype=getattr(torch, dtype_name), shape=shape,
                      contract="bitwise", evidence={"error": reason}, seed=invariance.seed, trials=0,
                      profile=invariance.profile, extra={"device": "cuda", "backend": "nccl"})  # fmt: skip
    pytest.skip(f"{name}: {reason}")


def _setting(device: str, name: str, request, invariance, dtype_name: str, oracle: str):
    """(pool, batch-oracle world, world sizes, hidden, sizes, extra, cannot-diverge reason) for one check.

    Pools are fixtures looked up here, so a GPU run never starts the gloo ranks and a CPU run
    never touches CUDA."""
    if device == "cpu":
        ranks = request.getfixturevalue("ranks")
        if ranks.closed is not None:  # an earlier check stalled or raised: fresh ranks for this one
            ranks.restart()
        sizes = POSITION_SIZES if oracle == "batch-position" else SIZES
        return ranks, WORLD, WORLD_SIZES, H, sizes, {"device": "cpu", "backend": "gloo"}, None
    from pytest_invariance.reference_kernels.collectives import symm_mem
    from pytest_invariance.reference_kernels.collectives.nccl_configs import nccl_version, pool_config

    worlds = _cuda_worlds()
    shape = {"H": CUDA_H, "world_size": worlds}
    if not worlds:  # the gpu mark skips first; this guards a direct call
        pytest.skip("no CUDA device")
    if name == symm_mem.NAME and (why := symm_mem.unavailable()) is not None:
        _unsupported(invariance, name, dtype_name, oracle, why, shape)
    if oracle == WORLD_SIZE and len(worlds) < 2:
        _unsupported(invariance, name, dtype_name, oracle,
                     f"the world-size oracle needs 2 or more GPUs; this host has {torch.cuda.device_count()}", shape)  # fmt: skip
    cfg = pool_config(name)
    world = max(worlds)
    extra = {"device": "cuda", "backend": "nccl", "nccl_config": cfg.name, "nccl_env": cfg.environment(),
             "nccl_version": nccl_version(), "gpus": torch.cuda.device_count()}  # fmt: skip
    blind = None
    if world < MIN_DIVERGENT_WORLD:
        blind = (f"{world} rank(s): each element is at most one addition, which commutes, so neither the"
                 f" implementation nor the ring control can diverge; this only proves the NCCL path runs")  # fmt: skip
    sizes = CUDA_POSITION_SIZES if oracle == "batch-position" else CUDA_SIZES
    return request.getfixturevalue("nccl_pools")(cfg.name), world, worlds, CUDA_H, sizes, extra, blind


@pytest.mark.parametrize(("device", "name", "dtype_name", "oracle"), _params())
def test_allreduce(invariance, request, device, name, dtype_name, oracle):
    from pytest_invariance.oracles.inputs import rows_pool
    from pytest_invariance.reference_kernels.collectives.group import rows_fn
    from pytest_invariance.reference_kernels.mutants.ring_allreduce import per_call_rotation, ring_all_reduce

    from ._expect import expect_for

    pool, world, worlds, hidden, sizes, extra, blind = _setting(device, name, request, invariance, dtype_name, oracle)
    kernel = next(k for k in _kernels(device) if k.name == name)
    dtype = getattr(torch, dtype_name)

    def subject(fn, fresh=False):
        if oracle == WORLD_SIZE:
            return lambda rows, w: rows_fn(pool, fn, w, fresh=fresh)(rows)
        return rows_fn(pool, fn, world, fresh=fresh)

    if oracle == "run-to-run":  # a mutant too: it must be deterministic call to call (expect_for)
        control, control_name = subject(per_call_rotation(), fresh=True), f"{CONTROL}-per-call-rotation"
    else:
        control, control_name = subject(ring_all_reduce), CONTROL
    if kernel.role == "mutant" and oracle != "run-to-run":  # divergent needs no control
        control, control_name = None, None
    parts = max(worlds) if oracle == WORLD_SIZE else world
    expect = expect_for(kernel.role, kernel.expect, oracle, kernel.oracle_expect)
    if blind is not None:  # nothing can diverge here: measured, never demanded (see the docstring)
        expect, extra = "measure", {**extra, "vacuous_by_construction": blind}
    invariance.check(
        subject(kernel.fn),
        lambda seed: rows_pool(max(sizes), (parts, hidden), seed, dtype),
        oracle=oracle,
        family="allreduce",
        implementation=name,
        quantization=QUANTIZATION_OF_DTYPE[dtype_name],
        dtype=dtype,
        shape={"H": hidden, "parts": parts, "world_size": worlds if oracle == WORLD_SIZE else world},
        control=control,
        control_name=control_name,
        expect=expect,
        batch_sizes=sizes,
        world_sizes=worlds if oracle == WORLD_SIZE else None,
        extra={**extra, "message": "rows x H elements, one row = one token"},
    )
