"""The allreduce family on real gloo ranks: right sums, the ring's chunking, and bounded faults.

One pool of 4 ranks serves the value tests; a pool of 2 is stalled, made to raise and restarted.
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.xdist_group("invariance-collectives")  # one worker starts the pools

import collective_faults as faults  # noqa: E402
from pytest_invariance.oracles.inputs import rows_pool  # noqa: E402
from pytest_invariance.reference_kernels.collectives import reference, stock  # noqa: E402
from pytest_invariance.reference_kernels.collectives.group import (  # noqa: E402
    RankPool,
    pack,
    rows_fn,
    shard_rows,
    unpack,
)
from pytest_invariance.reference_kernels.mutants import ring_allreduce as ring  # noqa: E402

from pytest_invariance.fixture import Invariance  # noqa: E402
from pytest_invariance.settings import Settings  # noqa: E402

IMPLS = {
    "torch-gloo": stock.gloo_all_reduce,
    "torch-gloo-rs-ag": stock.reduce_scatter_all_gather,
    "reference": reference.fixed_order_all_reduce,
    "mutant:ring-channels": ring.ring_all_reduce,
}
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}  # relative to the largest |sum|, vs float64
CALL_TIMEOUT_S = 3.0
SLACK_S = 10.0  # a loaded 2-core machine: the pool must still answer within timeout + this


@pytest.fixture(scope="module")
def four():
    with RankPool(4, (1, 2, 4), call_timeout=30.0) as pool:
        yield pool


@pytest.fixture(scope="module")
def two():
    with RankPool(2, (2,), call_timeout=CALL_TIMEOUT_S) as pool:
        yield pool


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("name", list(IMPLS))
def test_every_implementation_sums_at_every_world_size(four, name, dtype):
    rows = rows_pool(9, (4, 40), 3, dtype)
    exact = rows.double().sum(1)
    for w in (1, 2, 4):
        out = rows_fn(four, IMPLS[name], w)(rows)  # raises if the ranks disagree
        assert out.shape == exact.shape and out.dtype == dtype
        err = (out.double() - exact).abs().max().item() / exact.abs().max().item()
        assert err < TOL[dtype], f"{name} at TP{w}: relative error {err:.3g}"


def test_reference_same_bits_at_every_size_and_world_size(four):
    rows = rows_pool(17, (4, 40), 5, torch.bfloat16)
    full = rows_fn(four, reference.fixed_order_all_reduce, 4)(rows)
    for w in (1, 2, 4):
        f = rows_fn(four, reference.fixed_order_all_reduce, w)
        for m in (1, 2, 9, 17):
            assert torch.equal(f(rows[:m]).view(torch.int16), full[:m].view(torch.int16)), (w, m)


def test_ring_gives_a_row_other_bits_in_a_larger_message(four):
    """The control must diverge by its design on any host: 4 ranks, chunks that move with M."""
    rows = rows_pool(33, (4, 128), 7, torch.bfloat16)
    f = rows_fn(four, ring.ring_all_reduce, 4)
    whole = f(rows)
    moved = [m for m in (1, 2, 3, 8, 17) if not torch.equal(f(rows[:m]).view(torch.int16), whole[:m].view(torch.int16))]
    assert moved, "the ring gave every prefix the bits it has inside 33 rows"


def test_ring_slots_cover_the_message_once():
    for n, nbytes, w in ((1, 2, 4), (7, 14, 4), (4096, 8192, 4), (33 * 128, 33 * 256, 4), (10, 40000, 3)):
        idx = torch.cat(ring._slots(n, nbytes, w))
        assert torch.equal(idx.sort().values, torch.arange(n)), (n, w)
    assert [ring.channels(b) for b in (0, 4095, 4096, 16383, 16384, 10**9)] == [1, 1, 2, 2, 4, 4]


def test_shard_rows_is_rank_major_and_pack_round_trips():
    rows = rows_pool(3, (4, 5), 1, torch.bfloat16)
    shards = shard_rows(rows, 2)
    assert [s[0].shape for s in shards] == [(2, 3, 5), (2, 3, 5)]
    assert torch.equal(shards[1][0][0], rows[:, 2])
    with pytest.raises(ValueError, match="do not split evenly"):
        shard_rows(rows, 3)
    for t in (rows, torch.empty(0, 3), torch.arange(6, dtype=torch.int64).reshape(2, 3)):
        back = unpack(pack(t))
        assert back.dtype == t.dtype and torch.equal(back.view(torch.uint8), t.contiguous().view(torch.uint8))


def _closed_and_stopped(pool: RankPool) -> None:
    assert pool.closed is not None
    assert all(not p.is_alive() for p in pool._procs)
    with pytest.raises(RuntimeError, match="rank pool is closed"):
        pool.run(stock.gloo_all_reduce, 2, shard_rows(rows_pool(2, (2, 4), 0), 2))


def test_stalled_rank_makes_the_check_incomplete_within_the_timeout(two):
    inv = Invariance(Settings(run_id="test-collectives"), nodeid="stall")
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="incomplete: .*gave no result within 3 s"):
        inv.check(rows_fn(two, faults.stall_on_rank_1, 2), lambda seed: rows_pool(4, (2, 8), seed),
                  oracle="run-to-run", family="allreduce", implementation="stall", quantization="fp32-ieee",
                  expect="measure")  # fmt: skip
    assert time.monotonic() - t0 < CALL_TIMEOUT_S + SLACK_S
    assert inv.records[-1]["verdict"] == "incomplete"
    _closed_and_stopped(two)


def test_raising_rank_is_one_line_and_a_restart_recovers(two):
    if two.closed is not None:
        two.restart()
    rows = rows_pool(4, (2, 8), 1)
    with pytest.raises(RuntimeError, match=r"^rank 1 of 2: ValueError: rank 1 refuses$"):
        rows_fn(two, faults.raise_on_rank_1, 2)(rows)
    _closed_and_stopped(two)
    two.restart()
    with pytest.raises(RuntimeError, match="gave rank 1 other bits than rank 0"):
        rows_fn(two, faults.ranks_disagree, 2)(rows)  # all ranks answered: the pool stays up
    out = rows_fn(two, stock.gloo_all_reduce, 2)(rows)
    torch.testing.assert_close(out, rows.sum(1))


# -- backends and NCCL configurations (CPU: the NCCL paths are refused or exercised through gloo) --


def test_unknown_backend_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^unknown backend 'mpi'; expected one of gloo, nccl$"):
        RankPool(1, (1,), backend="mpi")


def test_nccl_world_beyond_the_gpus_is_refused_naming_both_counts():
    gpus = torch.cuda.device_count()
    msg = rf"^backend 'nccl' needs one GPU per rank: world size {gpus + 1} > {gpus} CUDA device\(s\) here$"
    with pytest.raises(ValueError, match=msg):
        RankPool(gpus + 1, (gpus + 1,), backend="nccl")


def test_a_pools_environment_reaches_its_ranks_before_they_run():
    """A gloo pool started under the vLLM pinning: each rank reports the variables it saw."""
    from functools import partial

    from collective_probes import decode, environment_of
    from pytest_invariance.reference_kernels.collectives.nccl_configs import config

    env = {**config("nccl-vllm-invariant").environment(), "INVARIANCE_PROBE": "a=b;c"}
    names = (*env, "INVARIANCE_UNSET_PROBE")
    with RankPool(2, (2,), env=env, call_timeout=30.0) as pool:
        outs = pool.run(partial(environment_of, names=names), 2, [[torch.zeros(1)]] * 2)
    for r, out in enumerate(outs):
        seen = decode(out)
        assert seen == {**env, "INVARIANCE_UNSET_PROBE": "<unset>"}, f"rank {r} saw {seen}"
    assert seen["NCCL_ALGO"] == "allreduce:tree" and seen["NCCL_NVLS_ENABLE"] == "0"


def test_every_nccl_configuration_keeps_nvlink_multicast_off():
    from pytest_invariance.reference_kernels.collectives import nccl_configs as nc

    for name, cfg in nc.CONFIGS.items():
        assert cfg.environment()["NCCL_NVLS_ENABLE"] == "0", name
        assert cfg.why, name
    assert nc.CONFIGS["nccl-default"].environment() == {"NCCL_NVLS_ENABLE": "0"}
    pinned = nc.CONFIGS["nccl-vllm-invariant"].env
    assert {k: pinned[k] for k in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
                                   "NCCL_NTHREADS")} == {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "Simple",
                                                         "NCCL_MIN_NCHANNELS": "1", "NCCL_MAX_NCHANNELS": "1",
                                                         "NCCL_NTHREADS": "1"}  # fmt: skip
    with pytest.raises(ValueError, match="unknown NCCL configuration 'nccl-ring'; expected one of nccl-default"):
        nc.config("nccl-ring")


def test_cuda_rows_are_registered_and_the_suite_skips_them_without_cuda():
    """On a CUDA-less host the NCCL rows exist (one per configuration) and their params carry ``gpu``."""
    from pytest_invariance.reference_kernels.catalogue import register_builtin
    from pytest_invariance.reference_kernels.collectives.nccl_configs import STOCK_ROWS, pool_config
    from pytest_invariance.reference_kernels.registry import kernels
    from pytest_invariance.suites.ops import test_allreduce as suite

    register_builtin("collectives")
    cuda = {k.name for k in kernels("allreduce", "cuda")}
    assert set(STOCK_ROWS) | {"reference", "mutant:ring-channels"} <= cuda
    assert not cuda & {"torch-gloo", "torch-gloo-rs-ag"}
    assert {n: pool_config(n).name for n in ("torch-nccl-vllm-pinned", "reference")} == {
        "torch-nccl-vllm-pinned": "nccl-vllm-invariant", "reference": "nccl-default"}  # fmt: skip
    params = suite._params()
    gpu = {p.id for p in params if any(m.name == "gpu" for m in p.marks)}
    assert gpu == {p.id for p in params if p.id.startswith("cuda-")}
    assert {p.values[1] for p in params if p.id in gpu} >= set(STOCK_ROWS) | {"torch-symm-mem"}
    if not torch.cuda.is_available():
        assert suite._cuda_worlds() == []


def test_rank_side_timing_runs_every_case_through_a_pool(four):
    """What bench_allreduce ships to each rank: catalogue lookup in the rank, a seeded message, one
    time per call (host clock on gloo; CUDA events on NCCL ranks, not reachable here)."""
    from functools import partial

    from pytest_invariance.reference_kernels.collectives.timing import time_all_reduce

    for name in ("torch-gloo", "reference"):
        fn = partial(time_all_reduce, implementation=name, tokens=3, hidden=8, iters=4, warmup=1)
        outs = four.run(fn, 2, [[torch.zeros(1)]] * 2)
        assert [o.shape for o in outs] == [(4,), (4,)] and all(bool((o > 0).all()) for o in outs), name


def test_one_rank_can_only_be_vacuous_never_invariant():
    """What the CUDA suite gets on one GPU: the ring control cannot diverge with one rank, so even
    the reference (bitwise equal at every size) is ``vacuous``, never a claimed ``invariant``."""
    inv = Invariance(Settings(run_id="test-collectives"), nodeid="one-rank")
    with RankPool(1, (1,), call_timeout=30.0) as one:
        for fn in (reference.fixed_order_all_reduce, stock.gloo_all_reduce):
            rec = inv.check(rows_fn(one, fn, 1), lambda seed: rows_pool(9, (1, 16), seed, torch.bfloat16),
                            oracle="batch-size", family="allreduce", implementation=fn.__name__,
                            control=rows_fn(one, ring.ring_all_reduce, 1), control_name="mutant:ring-channels",
                            expect="measure", batch_sizes=[1, 2, 3, 9])  # fmt: skip
            assert rec["verdict"] == "vacuous" and rec["control"]["diverged"] is False, fn.__name__
