"""Schema-valid records built through the real record builder, for the matrix and CLI tests.

The evidence mirrors what ``oracles.batch.OracleResult.evidence()`` produces, so the matrix is
tested on the shapes of data the fixture really writes.
"""

from __future__ import annotations

from pytest_invariance.records import make_record

H200 = {
    "hardware": {
        "name": "NVIDIA H200",
        "kind": "cuda",
        "device_count": 1,
        "compute_capability": "9.0",
        "sm_count": 132,
        "driver": "580.65",
        "cuda": "13.0",
        "cpu_model": "Intel Xeon Platinum 8480+",
        "cores": 16,
    },
    "software": {"python": "3.12.3", "torch": "2.11.0", "triton": "3.6.0", "pytest_invariance": "0.1.0"},
}
CPU = {
    "hardware": {
        "name": "AMD EPYC 9654",
        "kind": "cpu",
        "device_count": 0,
        "cpu_model": "AMD EPYC 9654",
        "cores": 2,
    },
    "software": {"python": "3.12.3", "torch": "2.13.0", "triton": "3.9.0", "pytest_invariance": "0.1.0"},
}


def divergent_evidence(first_n: int = 16, max_ulp: float = 3, failures: int = 4, trials: int = 5) -> dict:
    return {
        "failures": failures,
        "trials": trials,
        "rate": failures / trials,
        "wilson95": [0.37, 0.96],
        "comparisons": 40,
        "differing_comparisons": 12,
        "max_ulp": max_ulp,
        "max_abs": 1e-6,
        "max_frac_diff": 0.25,
        "first": {
            "batch_size": first_n,
            "position": 0,
            "trial": 0,
            "equal": False,
            "bitwise_equal": False,
            "numel": 4096,
            "n_diff": 17,
            "frac_diff": 0.004,
            "max_ulp": max_ulp,
            "max_abs": 1e-6,
            "first_index": [5],
            "contract": "bitwise",
        },
        "differing_batch_sizes": [first_n, 2 * first_n, 4 * first_n],
        "equivalence_classes": [[[1, first_n - 1]], [[first_n, 4 * first_n]]],
    }


def invariant_evidence(trials: int = 5) -> dict:
    return {
        "failures": 0,
        "trials": trials,
        "rate": 0.0,
        "wilson95": [0.0, 0.43],
        "comparisons": 40,
        "differing_comparisons": 0,
        "max_ulp": 0.0,
        "max_abs": 0.0,
        "max_frac_diff": 0.0,
        "first": None,
        "equivalence_classes": [[[1, 256]]],
    }


def rec(
    *,
    fingerprint: dict = H200,
    family: str = "matmul",
    implementation: str = "torch",
    oracle: str = "batch-size",
    verdict: str = "invariant",
    quantization: str = "fp32-ieee",
    nodeid: str = "suites/ops/test_matmul.py::test_matmul[4096x4096]",
    shape: dict | None = None,
    time: str = "2026-01-01T00:00:00+00:00",
    run_id: str = "run-a",
    evidence: dict | None = None,
    control: dict | None = None,
    cost: dict | None = None,
    mode: str | None = None,
    contract: str = "bitwise",
) -> dict:
    if evidence is None:
        evidence = divergent_evidence() if verdict == "divergent" else invariant_evidence()
    if control is None and verdict in ("invariant", "divergent"):
        control = {"name": "mutant:splitk-matmul", "diverged": True, "evidence": divergent_evidence()}
    r = make_record(
        run_id=run_id,
        fingerprint=fingerprint,
        family=family,
        implementation=implementation,
        oracle=oracle,
        verdict=verdict,
        nodeid=nodeid,
        quantization=quantization,
        dtype="float32",
        shape=shape if shape is not None else {"K": 4096, "N": 4096},
        mode=mode,
        contract=contract,
        evidence=evidence,
        control=control,
        cost=cost,
        seed=1234,
        trials=5,
        profile="quick",
    )
    r["time"] = time
    return r


def cpu_with_isa(isa: str, torch: str = "2.13.0+cpu", model: str = "Intel(R) Xeon(R) Processor") -> dict:
    """A CPU fingerprint as the fingerprint writes it now: the ISA torch dispatches to, AMX."""
    return {
        "hardware": {"name": model, "kind": "cpu", "device_count": 0, "cpu_model": model, "cores": 2,
                     "isa": isa, "amx": False},
        "software": {"python": "3.11.7", "torch": torch, "triton": "3.9.0", "pytest_invariance": "0.1.0",
                     "cublas": None, "cudnn": None, "nccl": None},
    }  # fmt: skip


def h200_on(torch: str) -> dict:
    """The H200 fingerprint on another torch build: another software stack, the same column."""
    return {"hardware": dict(H200["hardware"]), "software": {**H200["software"], "torch": torch}}
