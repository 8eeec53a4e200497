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


def _kernels():
    from pytest_invariance.reference_kernels.catalogue import register_builtin
    from pytest_invariance.reference_kernels.registry import kernels

    register_builtin("collectives")
    return kernels("allreduce", "cpu")


def _params() -> list:
    return [
        pytest.param(k.name, dt, oracle, marks=pytest.mark.quant(QUANTIZATION_OF_DTYPE[dt]),
                     id=f"cpu-{k.name}-H{H}-{QUANTIZATION_OF_DTYPE[dt]}-{oracle}")  # fmt: skip
        for k in _kernels()
        for dt in DTYPES
        for oracle in ORACLES
    ]


@pytest.fixture(scope="module")
def ranks():
    """One pool of ``WORLD`` gloo ranks for the module; restarted if a check closed it."""
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    from pytest_invariance.reference_kernels.collectives.group import RankPool

    pool = RankPool(WORLD, WORLD_SIZES, call_timeout=CALL_TIMEOUT_S)
    yield pool
    pool.close()


@pytest.mark.parametrize(("name", "dtype_name", "oracle"), _params())
def test_allreduce(invariance, ranks, name, dtype_name, oracle):
    from pytest_invariance.oracles.inputs import rows_pool
    from pytest_invariance.reference_kernels.collectives.group import rows_fn
    from pytest_invariance.reference_kernels.mutants.ring_allreduce import per_call_rotation, ring_all_reduce

    from ._expect import expect_for

    if ranks.closed is not None:  # an earlier check stalled or raised: fresh ranks for this one
        ranks.restart()
    kernel = next(k for k in _kernels() if k.name == name)
    dtype = getattr(torch, dtype_name)
    sizes = POSITION_SIZES if oracle == "batch-position" else SIZES

    def subject(fn, fresh=False):
        if oracle == WORLD_SIZE:
            return lambda rows, w: rows_fn(ranks, fn, w, fresh=fresh)(rows)
        return rows_fn(ranks, fn, WORLD, fresh=fresh)

    if oracle == "run-to-run":  # a mutant too: it must be deterministic call to call (expect_for)
        control, control_name = subject(per_call_rotation(), fresh=True), f"{CONTROL}-per-call-rotation"
    else:
        control, control_name = subject(ring_all_reduce), CONTROL
    if kernel.role == "mutant" and oracle != "run-to-run":  # divergent needs no control
        control, control_name = None, None
    invariance.check(
        subject(kernel.fn),
        lambda seed: rows_pool(max(SIZES), (WORLD, H), seed, dtype),
        oracle=oracle,
        family="allreduce",
        implementation=name,
        quantization=QUANTIZATION_OF_DTYPE[dtype_name],
        dtype=dtype,
        shape={"H": H, "parts": WORLD, "world_size": WORLD_SIZES if oracle == WORLD_SIZE else WORLD},
        control=control,
        control_name=control_name,
        expect=expect_for(kernel.role, kernel.expect, oracle, kernel.oracle_expect),
        batch_sizes=sizes,
        world_sizes=WORLD_SIZES if oracle == WORLD_SIZE else None,
        extra={"device": "cpu", "backend": "gloo", "message": "rows x H elements, one row = one token"},
    )
