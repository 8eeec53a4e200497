"""Log-softmax and mean over the last dim (family ``softmax``): batch-invariant or not?

Log-softmax turns logits into the logprobs an engine reports; a mean over the
hidden dim is how many model codebases write RMSNorm (``x.pow(2).mean(-1)``).
Every implementation in the registry, log-softmax kernels under family
``softmax`` (``fn(x[M, V]) -> log_softmax(x, -1)``) and mean kernels under
``mean`` (``fn(x[M, V]) -> x.mean(-1)``), x bf16/fp16/fp32 x vocab or hidden
sizes x oracles batch-size, batch-position, run-to-run. Records carry family
``softmax`` with ``shape.op`` = ``log_softmax`` or ``mean``. Stock rows are
measured, references must be ``invariant``, mutants ``divergent``; controls
are the split-reduction mutants (per-call split count for run-to-run).
"""

from __future__ import annotations

import pytest

from ._rowsuite import INTERPRET_WIDTH, check_row_op, device_params

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("softmax")

# log-softmax over a vocabulary: Llama-3's 128256 and Qwen2's 151936 on GPU. On CPU 8000 columns
# (not a power of two, so the tree still pads): Llama-2's 32000 cost make test minutes of its
# 15 on the 2-core CI machine (fp32 runs 12 trials) and showed nothing 8000 does not.
VOCAB = {"cuda": (("llama3", 128256), ("qwen2", 151936)), "cpu": (("small-vocab", 8000),)}
# mean over a hidden dim (the RMSNorm statistic): Llama-3-8B and Qwen2-0.5B.
HIDDEN = {
    "cuda": (("llama3-8b", 4096), ("qwen2-0.5b", 896)),
    "cpu": (("llama3-8b", 4096), ("qwen2-0.5b", 896)),
}


def _shapes(table):
    def make(device: str, name: str) -> list[dict]:
        if device == "cpu" and name.endswith("triton"):
            return [{"label": f"N{INTERPRET_WIDTH}", "N": INTERPRET_WIDTH, "model": "tiny"}]
        return [{"label": f"N{n}", "N": n, "model": m} for m, n in table[device]]

    return make


def _check(invariance, fam, op, device, name, dtype_name, shape, oracle, control_fn, control_name):
    check_row_op(
        invariance, fam, device, name, dtype_name, oracle, width=shape["N"], bind=lambda f: f,
        control_fn=control_fn, control_name=control_name, record_family="softmax",
        shape={"op": op, **{k: v for k, v in shape.items() if k != "label"}}, extra={"op": op, "device": device},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("device", "name", "dtype_name", "shape", "oracle"), device_params("softmax", _shapes(VOCAB))
)
def test_log_softmax(invariance, device, name, dtype_name, shape, oracle):
    from pytest_invariance.reference_kernels.mutants.rowsplit import split_log_softmax

    _check(
        invariance,
        "softmax",
        "log_softmax",
        device,
        name,
        dtype_name,
        shape,
        oracle,
        split_log_softmax,
        "mutant:logsoftmax-split",
    )


@pytest.mark.parametrize(
    ("device", "name", "dtype_name", "shape", "oracle"), device_params("mean", _shapes(HIDDEN))
)
def test_mean(invariance, device, name, dtype_name, shape, oracle):
    from pytest_invariance.reference_kernels.mutants.rowsplit import split_mean

    _check(
        invariance, "mean", "mean", device, name, dtype_name, shape, oracle, split_mean, "mutant:mean-split"
    )
