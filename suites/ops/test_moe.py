"""MoE: do a token's experts and its expert-mixed output depend on the rest of the batch?

Families ``moe-router`` and ``moe-experts``, every implementation in the
registry (stock, reference, mutants, registered kernels; signatures in
``reference_kernels/moe/register.py``) x router configs of real MoE models x
oracles batch-size, batch-position (row permutations), run-to-run.

Router logits carry deliberate exact ties (``with_ties``: a quarter of each
row equals the row max) and near-ties (tied entries nudged by one ulp), the
case where top-k implementations may disagree. Expert inputs are rows of
[x (H) | router logits (E)]: each row is routed by the reference router, so
only the experts under test can bring the batch in. On CUDA the sweep adds the
expert-alignment thresholds (an expert's token count crossing the 64-row tile).
Reference: ``invariant``; stock: measured; mutants: ``divergent``. Controls:
``mutant:round-robin-ties`` (router), ``mutant:fp8-batch-scale`` (experts,
batch oracles), ``mutant:atomic-combine`` (experts, run-to-run).
"""

from __future__ import annotations

from functools import lru_cache

import pytest
from pytest_invariance.oracles.vocabulary import OP_ORACLES as ORACLES

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("moe")

# Router configs of real models; H/I are the real hidden and expert-intermediate sizes.
CONFIGS = {
    "mixtral-8x7b": {
        "E": 8,
        "k": 2,
        "scoring": "softmax",
        "n_groups": None,
        "topk_groups": None,
        "H": 4096,
        "I": 14336,
    },
    "qwen3-30b-a3b": {
        "E": 128,
        "k": 8,
        "scoring": "softmax",
        "n_groups": None,
        "topk_groups": None,
        "H": 2048,
        "I": 768,
    },
    "deepseek-v3": {
        "E": 256,
        "k": 8,
        "scoring": "sigmoid",
        "n_groups": 8,
        "topk_groups": 4,
        "H": 7168,
        "I": 2048,
    },
}
CPU_DIMS = {"H": 32, "I": 16}  # CPU: tiny experts, real router shapes
CPU_SIZES = (1, 2, 3, 8, 9)  # CI is a 2-core CPU: a few sizes around the 8-row edge
CPU_TRIALS = 2
CPU_EXPERT_CONFIGS = ("mixtral-8x7b", "deepseek-v3")  # E=8 top-2 and E=256 grouped top-8
ALIGN_SIZES = (127, 128, 129, 255, 256, 257, 511, 512, 513)  # expert run crossing BLOCK_M=64 (CUDA)
TIES = ("ties", "near-ties")
# Mutants run only where they are built to diverge.
MUTANT_ORACLES = {
    "mutant:round-robin-ties": ORACLES,
    "mutant:fp8-batch-scale": ("batch-size", "batch-position"),
    "mutant:atomic-combine": ("run-to-run",),
}


def _kernels(family: str, device: str):
    from pytest_invariance.reference_kernels.catalogue import register_builtin
    from pytest_invariance.reference_kernels.registry import kernels

    register_builtin("moe")
    return kernels(family, device)


def _params(family: str, extra_axis: tuple[str, ...]) -> list:
    out = []
    for device in ("cpu", "cuda"):
        marks = [pytest.mark.gpu] if device == "cuda" else []
        for k in _kernels(family, device):
            for cfg in CONFIGS:
                if family == "moe-experts" and device == "cpu" and cfg not in CPU_EXPERT_CONFIGS:
                    continue
                for x in extra_axis:
                    for oracle in MUTANT_ORACLES.get(k.name, ORACLES):
                        out.append(
                            pytest.param(
                                device,
                                k.name,
                                cfg,
                                x,
                                oracle,
                                marks=marks,
                                id=f"{device}-{k.name}-{cfg}-{x}-{oracle}",
                            )
                        )
    return out


def _sizes(invariance, device: str) -> list[int]:
    if device == "cpu":
        return list(CPU_SIZES)
    return sorted(set(invariance.batch_sizes()) | set(ALIGN_SIZES))


def _trials(invariance, device: str) -> int:
    return min(invariance.trials, CPU_TRIALS) if device == "cpu" else invariance.trials


def _router_logits(n: int, e: int, seed: int, kind: str, device: str) -> torch.Tensor:
    from pytest_invariance.oracles.inputs import with_ties

    x = with_ties((n, e), seed, tie_fraction=0.25)
    if kind == "near-ties":
        top = x.amax(dim=-1, keepdim=True)
        g = torch.Generator().manual_seed(int(seed) + 2)
        nudge = (x == top) & (torch.rand(x.shape, generator=g) < 0.5)
        x = torch.where(nudge, torch.nextafter(x, torch.full_like(x, float("-inf"))), x)
    return x.to(device)


def _route_kw(cfg: dict) -> dict:
    return {
        "scoring": cfg["scoring"],
        "renormalize": True,
        "n_groups": cfg["n_groups"],
        "topk_groups": cfg["topk_groups"],
    }


@pytest.fixture(autouse=True)
def _fresh_mutant_state():
    """Stateful mutants start afresh in every test (serial and xdist runs then agree)."""
    from pytest_invariance.reference_kernels.mutants.moe_mutants import reset_moe_mutants

    reset_moe_mutants()


@pytest.mark.parametrize(("device", "name", "cfg_name", "ties", "oracle"), _params("moe-router", TIES))
def test_moe_router(invariance, device, name, cfg_name, ties, oracle):
    from pytest_invariance.reference_kernels.mutants.moe_mutants import round_robin_ties_router

    kernel = next(k for k in _kernels("moe-router", device) if k.name == name)
    cfg = CONFIGS[cfg_name]
    kw = _route_kw(cfg)
    sizes = _sizes(invariance, device)

    def as_rows(fn):
        def run(logits: torch.Tensor) -> torch.Tensor:
            w, ids = fn(logits, cfg["k"], **kw)
            # One integer row per token, slot order kept (it matters for the combine): the weights'
            # fp32 bits (positive, so a difference counts ULPs) then the expert ids (a difference
            # counts experts). As float64 both were exact too, but an id change read as ~4e18 ULP.
            bits = w.float().contiguous().view(torch.int32).to(torch.int64)
            return torch.cat([bits, ids.to(torch.int64)], dim=-1)

        return run

    control = None if kernel.role == "mutant" else as_rows(round_robin_ties_router)
    invariance.check(
        as_rows(kernel.fn),
        lambda seed: _router_logits(max(sizes), cfg["E"], seed, ties, device),
        oracle=oracle,
        family="moe-router",
        implementation=name,
        quantization="fp32-ieee",
        dtype=torch.float32,
        shape={"model": cfg_name, "E": cfg["E"], "top_k": cfg["k"], **kw, "logits": ties},
        control=control,
        control_name=None if control is None else "mutant:round-robin-ties",
        expect=kernel.expect,
        batch_sizes=sizes,
        trials=_trials(invariance, device),
        extra={"device": device, "out": "weights' fp32 bits then expert ids, as int64 (differences: ULPs, experts)"},
    )


def _randn_bf16(shape: tuple[int, ...], scale: float, g: torch.Generator, device: str) -> torch.Tensor:
    """bf16 weights made one expert at a time (an fp32 copy of a DeepSeek layer is ~30 GiB)."""
    out = torch.empty(shape, dtype=torch.bfloat16, device=device)
    for e in range(shape[0]):
        out[e] = torch.randn(shape[1:], generator=g, device=device) * scale
    return out


@lru_cache(maxsize=1)
def _expert_weights(cfg_name: str, device: str):
    from pytest_invariance.reference_kernels.moe import quantize_weight

    cfg = CONFIGS[cfg_name]
    dims = CPU_DIMS if device == "cpu" else cfg
    e, h, i = cfg["E"], dims["H"], dims["I"]
    g = torch.Generator(device=device).manual_seed(1234)
    w1 = _randn_bf16((e, 2 * i, h), h**-0.5, g, device)
    w2 = _randn_bf16((e, h, i), i**-0.5, g, device)
    return w1, w2, quantize_weight(w1), quantize_weight(w2)


@pytest.mark.parametrize(
    ("device", "name", "cfg_name", "quant", "oracle"), _params("moe-experts", ("model",))
)
def test_moe_experts(invariance, device, name, cfg_name, quant, oracle):
    from pytest_invariance.oracles.inputs import rows_pool
    from pytest_invariance.reference_kernels.catalogue import is_fp8_experts as is_fp8
    from pytest_invariance.reference_kernels.moe import route
    from pytest_invariance.reference_kernels.mutants.moe_mutants import (
        experts_atomic_combine,
        fp8_experts_batch_scale,
    )

    kernel = next(k for k in _kernels("moe-experts", device) if k.name == name)
    cfg = CONFIGS[cfg_name]
    kw = _route_kw(cfg)
    w1, w2, (q1, s1), (q2, s2) = _expert_weights(cfg_name, device)
    h = w1.shape[2]
    sizes = _sizes(invariance, device)

    def as_rows(fn, fp8: bool):
        def run(rows: torch.Tensor) -> torch.Tensor:
            x = rows[:, :h].to(torch.bfloat16)
            weights, ids = route(rows[:, h:], cfg["k"], **kw)
            if fp8:
                return fn(x, q1, q2, s1, s2, weights, ids)
            return fn(x, w1, w2, weights, ids)

        return run

    fp8 = is_fp8(name)
    if kernel.role == "mutant":
        control, control_name = None, None
    elif oracle == "run-to-run":
        control, control_name = as_rows(experts_atomic_combine, False), "mutant:atomic-combine"
    else:
        control, control_name = as_rows(fp8_experts_batch_scale, True), "mutant:fp8-batch-scale"
    quantization = "bf16"
    if fp8:
        quantization = "fp8-e4m3-tensor-dynamic" if name == "mutant:fp8-batch-scale" else "fp8-e4m3-token"
    invariance.check(
        as_rows(kernel.fn, fp8),
        lambda seed: rows_pool(max(sizes), (h + cfg["E"],), seed, decades=2.0, device=device),
        oracle=oracle,
        family="moe-experts",
        implementation=name,
        quantization=quantization,
        dtype=torch.bfloat16,
        shape={"model": cfg_name, "E": cfg["E"], "top_k": cfg["k"], "H": h, "I": w2.shape[2], **kw},
        control=control,
        control_name=control_name,
        expect=kernel.expect,
        batch_sizes=sizes,
        trials=_trials(invariance, device),
        extra={"device": device, "router": "reference"},
    )
