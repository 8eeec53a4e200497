"""Shared parametrization of the attention suites (``test_attention_prefill``, ``test_attention_decode``).

Which implementations run at which head configs, probe lengths, batch sizes and trials on each
device, what each cell must come out as, and the shape and extras its record carries. Inputs and
the calls that run them live in ``_attention_runs``; no comparison logic lives here.
"""

from __future__ import annotations

import os

import pytest
from pytest_invariance.oracles.vocabulary import QUANTIZATION_OF_DTYPE as QUANT

torch = pytest.importorskip("torch")
from pytest_invariance.reference_kernels.attention import SPLIT_SIZE  # noqa: E402 - needs torch

HEADS = {"llama3-8b": (32, 8, 128), "mha-32x128": (32, 32, 128)}
CPU_HEADS = {"llama3-8b": (8, 2, 16), "mha-32x128": (4, 4, 16)}  # same GQA ratios, tiny
GPU_SPLIT, CPU_SPLIT = SPLIT_SIZE, 16  # the split the engine runs on CUDA; tiny on CPU
GPU_LENGTHS = (1, 257, 1023, 1024, 1025, 4096, 8192)  # split edges
CPU_LENGTHS = (1, 15, 17, 40)
CPU_STOCK_LENGTHS = (17,)  # stock on CPU: one length across a split edge (CI time)
CPU_SIZES = (1, 2, 3, 9)
CPU_TRIALS = 2
PAGE = 16
# Tiny CPU lengths and a small SM budget, so that the heuristic's split count moves with the batch.
CPU_MUTANT_KW = {"min_keys": 4, "sm_count": 8}
CONTROL = {"attention-prefill": "mutant:splitkv-prefill", "attention-decode": "mutant:splitkv-decode"}


@pytest.fixture(autouse=True)
def one_cpu_thread():
    """Intra-op threads off while these tiny CPU shapes run (restored after).

    The reference path is element-wise, so its bits do not depend on the thread
    count; but on a loaded 2-core CI box under xdist, two workers x two threads spin
    on tensors of a few thousand elements and run ~20x slower.
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def kernels_of(family: str, device: str):
    from pytest_invariance.reference_kernels.catalogue import register_builtin
    from pytest_invariance.reference_kernels.registry import kernels

    register_builtin("attention")
    return kernels(family, device)


def dtype_name(device: str, name: str) -> str:
    # CPU: fp32 (the Triton interpreter's bf16 dots are wrong, and fp16 outputs round
    # the mutant's fp32 split differences away at these tiny shapes).
    return "bfloat16" if device == "cuda" else "float32"


def lengths_of(device: str, name: str) -> tuple[int, ...]:
    if device == "cuda":
        return GPU_LENGTHS
    if name == "reference-triton":
        return (17,)
    return CPU_STOCK_LENGTHS if name.startswith("torch") else CPU_LENGTHS


def _case(device: str, name: str, cfg: str, length: int, oracle: str | None):
    """One cell's params (``oracle`` None: the prefill-decode test, which takes no oracle argument)."""
    marks = [
        pytest.mark.quant(QUANT[dtype_name(device, name)]),
        *([pytest.mark.gpu] if device == "cuda" else []),
    ]
    args = (device, name, cfg, length) if oracle is None else (device, name, cfg, length, oracle)
    return pytest.param(
        *args, marks=marks, id=f"{device}-{name}-{cfg}-L{length}-{oracle or 'prefill-decode'}"
    )


def attention_params(family: str, oracles: tuple[str, ...]) -> list:
    out = []
    for device in ("cpu", "cuda"):
        for k in kernels_of(family, device):
            for cfg in HEADS:
                if device == "cpu" and k.role == "stock" and cfg != "llama3-8b":
                    continue
                if device == "cpu" and k.name == "reference-triton" and cfg != "llama3-8b":
                    continue  # the interpreter is slow: one config
                for length in lengths_of(device, k.name):
                    if device == "cpu" and cfg != "llama3-8b" and length != 17:
                        continue  # CI time: the MHA config at one length on CPU
                    if k.role == "mutant" and length == 1:
                        continue  # one key: no split to move, nothing to diverge
                    for oracle in oracles:
                        if device == "cpu" and k.name == "reference-triton" and oracle == "batch-position":
                            continue  # interpreter time; batch-size covers the batch on CPU
                        if k.role == "mutant" and oracle == "run-to-run":
                            continue  # deterministic by design: it diverges with the batch only
                        out.append(_case(device, k.name, cfg, length, oracle))
    return out


def heads_of(device: str, cfg: str) -> tuple[int, int, int]:
    return (HEADS if device == "cuda" else CPU_HEADS)[cfg]


def split_of(device: str) -> int:
    return GPU_SPLIT if device == "cuda" else CPU_SPLIT


ONE_KEY = "one key: the softmax weight is exactly 1, so any schedule returns v"


def expect_for_length(kernel, length: int) -> str:
    """One key: every implementation returns v exactly, so no control can diverge (vacuous); measure it."""
    return "measure" if length == 1 and kernel.expect == "invariant" else kernel.expect


ONE_KEY_ORACLES = ("batch-size", "batch-position", "chunking", "prefill-decode")


def record_extra(device: str, length: int, oracle: str, mixed: bool = False, **more) -> dict:
    """Record extras; at one key a probe-row oracle declares why it is vacuous (the matrix names it apart).

    Run-to-run compares the whole batch: trivial only when every sequence has one key (not ``mixed``).
    """
    trivial = length == 1 and (oracle in ONE_KEY_ORACLES or not mixed)
    return {"device": device, **({"vacuous_by_construction": ONE_KEY} if trivial else {}), **more}


def record_shape(cfg: str, heads, length: int, device: str, mixed: bool | None = None) -> dict:
    hq, hkv, d = heads
    s = {
        "model": cfg,
        "Hq": hq,
        "Hkv": hkv,
        "D": d,
        "kv_len": length,
        "split_size": split_of(device),
        "page": PAGE,
    }
    if mixed is not None:
        s["neighbours"] = "mixed lengths" if mixed else "same length"
    return s


def chunk_sizes(device: str, length: int) -> list[int]:
    s = split_of(device)
    return sorted({c for c in (s, s // 2 + 1, 3 * s, 7) if c < length}) or [1]


def prefill_decode_params() -> list:
    out = []
    for device in ("cpu", "cuda"):
        pre = {k.name: k for k in kernels_of("attention-prefill", device)}
        for k in kernels_of("attention-decode", device):
            if k.name not in pre or k.role == "mutant":
                continue
            for cfg in HEADS:
                if device == "cpu" and k.role == "stock" and cfg != "llama3-8b":
                    continue
                for length in lengths_of(device, k.name):
                    out.append(_case(device, k.name, cfg, length, None))
    return out


def decode_positions(length: int, split: int) -> list[int]:
    return sorted({p for p in (0, split - 1, split, length // 2, length - 1) if 0 <= p < length})


def sizes_of(invariance, device: str, length: int) -> list[int]:
    if device == "cpu":
        return list(CPU_SIZES)
    return invariance.batch_sizes(limit=9 if length >= 4096 else 33)


def trials_of(invariance, device: str) -> int:
    return min(invariance.trials, CPU_TRIALS) if device == "cpu" else invariance.trials


def skip_unavailable(device: str, name: str) -> None:
    if name == "reference-triton" and not interpreting():
        pytest.skip("reference-triton runs under TRITON_INTERPRET=1 only")
