"""One GPU per xdist worker: worker gw<i> on GPU i mod count, or on ``--invariance-gpus``' entry.

On a CPU host the CUDA device count is replaced by a fixed one in the pytester project's
conftest (the only fake here: no GPU exists to count); the pinning logic, the option and xdist's
worker ids are the real ones.
"""

from __future__ import annotations

import json

import pytest

from pytest_invariance.gpus import GpuChoiceError, assign_gpu, parse_gpus, worker_index


def test_worker_i_takes_gpu_i_mod_count() -> None:
    assert [assign_gpu(f"gw{i}", 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert assign_gpu(None, 4) == 0 and worker_index("master") == 0  # no xdist: the first GPU
    assert assign_gpu("gw5", 0) is None  # no GPU: nothing pinned


def test_an_explicit_list_overrides_the_count() -> None:
    assert [assign_gpu(f"gw{i}", 8, (2, 5)) for i in range(4)] == [2, 5, 2, 5]
    with pytest.raises(GpuChoiceError, match="GPU 9 does not exist"):
        assign_gpu("gw0", 4, (9,))
    assert parse_gpus("0, 3") == (0, 3)
    for bad in ("a", "1,1", "-1", ""):
        with pytest.raises(GpuChoiceError, match="--invariance-gpus"):
            parse_gpus(bad)


CONFTEST = """
import pytest_invariance.gpus as gpus

gpus.device_count = lambda: {count}  # this CPU host has no GPU to count
"""

SUITE = """
import json, os
import pytest

from pytest_invariance.gpus import pinned_gpu  # what the fixture's device and gpu and the fingerprint use

@pytest.mark.parametrize("i", range(2))
def test_pinned(i):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "none")
    with open(f"pin-{worker}-{i}.json", "w") as fh:
        json.dump({"worker": worker, "gpu": pinned_gpu()}, fh)
"""


def _pins(pytester: pytest.Pytester) -> dict[str, int]:
    out = {}
    for path in sorted(pytester.path.glob("pin-*.json")):
        doc = json.loads(path.read_text())
        assert out.setdefault(doc["worker"], doc["gpu"]) == doc["gpu"]  # a worker keeps its GPU
    return out


def test_four_xdist_workers_spread_over_three_gpus(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.format(count=3))
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-n", "4", "--dist", "each", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)
    assert _pins(pytester) == {"gw0": 0, "gw1": 1, "gw2": 2, "gw3": 0}


def test_the_gpu_list_reaches_the_workers(pytester: pytest.Pytester) -> None:
    """``--invariance-gpus`` is read by each worker's own plugin (two workers are enough)."""
    pytester.makeconftest(CONFTEST.format(count=8))
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-n", "2", "--dist", "each", "-p", "no:cacheprovider", "--invariance-gpus", "6,1")
    result.assert_outcomes(passed=4)
    assert _pins(pytester) == {"gw0": 6, "gw1": 1}


def test_a_bad_gpu_list_is_a_one_line_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--invariance-gpus", "0,x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--invariance-gpus: 'x' is not a GPU index" in result.stderr.str()
