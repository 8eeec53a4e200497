"""Multi-LoRA: does a token's output depend on its batch, or on which adapters its neighbours use?

Family ``lora`` (``fn(x, base, lora_a[L, R, H], lora_b[L, N, R], ids, scale) -> [M, N]``, each
token its own adapter or none, id -1): stock PEFT-style adapter loop, stock vLLM torch ``bgmv``,
the reference, the SGMV-style segment split-K mutant and registered kernels x batch-size,
batch-position, run-to-run and ``neighbours``: the same probe (adapter 0) at the same batch
sizes with its neighbours' adapters reassigned (none, all the probe's adapter, all another one,
alternating, the pool's mix), probe at positions 0 and N-1, each against the probe alone. A row
of the oracles is ``[x | base | adapter id]`` (fp32, cast to bf16 inside). Controls:
``mutant:lora-segment-splitk`` (batch and neighbour oracles), its regime per call (run-to-run).
"""

from __future__ import annotations

from functools import lru_cache, partial

import pytest
from pytest_invariance.oracles.vocabulary import NEIGHBOURS, OP_ORACLES

from ._familysuite import expect_of, is_interpreted, kernel_named, params, record_shape, sizes, trials

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("lora")

GROUP = FAMILY = "lora"
SCALE = 0.5
CPU_SIZES = (1, 2, 3, 5, 8, 9, 33)
SHAPES = {"cpu": [{"label": "H256-N256-r16-L4", "H": 256, "N": 256, "R": 16, "L": 4}],
          "cuda": [{"label": "llama3-8b.o-r16-L8", "H": 4096, "N": 4096, "R": 16, "L": 8},
                   {"label": "llama3-8b.qkv-r64-L4", "H": 4096, "N": 6144, "R": 64, "L": 4}]}  # fmt: skip
INTERPRET_SHAPE = {"label": "tiny", "H": 64, "N": 32, "R": 8, "L": 3}
PATTERNS = ("none", "same", "other", "alternating", "mixed")


def _variants(device: str, kernel):
    shapes = [INTERPRET_SHAPE] if is_interpreted(device, kernel.name) else SHAPES[device]
    return [("bf16", "bf16", s) for s in shapes]


@lru_cache(maxsize=2)
def _adapters(h: int, n: int, r: int, n_lora: int, device: str):
    from ._gemmsuite import wide

    return (wide((n_lora, r, h), 11, device, torch.bfloat16) * h**-0.5,
            wide((n_lora, n, r), 12, device, torch.bfloat16) * r**-0.5)  # fmt: skip


def _pool(rows: int, shp: dict, seed: int, device: str) -> torch.Tensor:
    from ._gemmsuite import wide

    h, n = shp["H"], shp["N"]
    g = torch.Generator().manual_seed(seed + 99)
    ids = torch.randint(-1, shp["L"], (rows, 1), generator=g).float()
    ids[:2] = 0  # the probe always has an adapter, and its first neighbour shares it
    data = wide((rows, h + n), seed, device).to(torch.bfloat16).float()
    return torch.cat([data, ids.to(device)], dim=1)


def as_rows(fn, shp: dict, device: str):
    a, b = _adapters(shp["H"], shp["N"], shp["R"], shp["L"], device)
    h, n = shp["H"], shp["N"]

    def run(rows: torch.Tensor) -> torch.Tensor:
        x, base = rows[:, :h].to(torch.bfloat16), rows[:, h : h + n].to(torch.bfloat16)
        return fn(x, base, a, b, rows[:, -1].long(), SCALE)

    return run


def _with_ids(rows: torch.Tensor, pattern: str, n_lora: int) -> torch.Tensor:
    out = rows.clone()
    k = out.shape[0]
    fill = {"none": [-1] * k, "same": [0] * k, "other": [1] * k,
            "alternating": [(i % 2) * (1 + i % max(1, n_lora - 1)) - (i % 3 == 0) for i in range(k)]}  # fmt: skip
    if pattern in fill:
        out[:, -1] = torch.tensor(fill[pattern], dtype=out.dtype, device=out.device)
    return out


def neighbours_oracle(fn, pool_of, batch: list[int], n_trials: int, seed: int, n_lora: int):
    from pytest_invariance.oracles.batch import OracleResult, Point
    from pytest_invariance.oracles.compare import compare

    res = OracleResult(NEIGHBOURS, "bitwise")
    big = [s for s in batch if s >= 2]
    picked = sorted({big[round(i * (len(big) - 1) / 3)] for i in range(4)}) if len(big) > 4 else big
    for t in range(n_trials):
        rows = pool_of(seed + t)
        probe = rows[:1]
        alone = fn(probe)[0].clone()
        for n in picked:  # at most 4 sizes, the smallest and largest included
            for pattern in PATTERNS:
                nb = _with_ids(rows[1:n], pattern, n_lora)
                for pos, b in ((0, torch.cat([probe, nb])), (n - 1, torch.cat([nb, probe]))):
                    out = fn(b)[pos]
                    res.add(Point(n, pos, t, compare(alone, out), label=f"neighbours {pattern}"))
        res.trials += 1
    return res


@pytest.mark.parametrize(("device", "name", "quant", "shp", "oracle"),
                         params(GROUP, FAMILY, _variants, (*OP_ORACLES, NEIGHBOURS)))  # fmt: skip
def test_lora(invariance, device, name, quant, shp, oracle):
    from pytest_invariance.reference_kernels.mutants.fused_norm_mutants import per_call
    from pytest_invariance.reference_kernels.mutants.lora_segment import lora_segment_splitk

    from pytest_invariance.judge import Control, Observation, judge

    kernel = kernel_named(GROUP, FAMILY, device, name)
    batch = sizes(invariance, device, name, CPU_SIZES)
    n_trials = trials(invariance, device, name)
    mutant = lora_segment_splitk
    if is_interpreted(device, name):  # sizes 1..5 there: the same mechanism, its edge at one token
        mutant = partial(lora_segment_splitk, small_segment=1)
    if oracle == "run-to-run":
        control, control_name = per_call(mutant, (1, 64)), "mutant:lora-segment-splitk-per-call"
    else:
        control, control_name = mutant, "mutant:lora-segment-splitk"
    fn, ctl = as_rows(kernel.fn, shp, device), as_rows(control, shp, device)
    pool_of = lambda seed: _pool(max(batch), shp, seed, device)  # noqa: E731
    common = dict(family=FAMILY, implementation=name, quantization=quant, dtype=torch.bfloat16,
                  shape=record_shape(shp), extra={"device": device, "scale": SCALE, "row": "[x | base | id]"})  # fmt: skip
    if oracle != NEIGHBOURS:
        invariance.check(fn, pool_of, oracle=oracle, control=ctl, control_name=control_name, batch_sizes=batch,
                         trials=n_trials, expect=expect_of(kernel, oracle), **common)  # fmt: skip
        return
    sub = neighbours_oracle(fn, pool_of, batch, n_trials, invariance.seed, shp["L"])
    con = neighbours_oracle(ctl, pool_of, batch, n_trials, invariance.seed, shp["L"])
    judge(invariance, Observation(sub.diverged, sub.evidence(), sub.describe()),
          Control(control_name, Observation(con.diverged, con.evidence(), con.describe())),
          expect=expect_of(kernel, oracle), oracle=NEIGHBOURS, contract=sub.contract, seed=invariance.seed,
          trials=sub.trials, profile=invariance.profile, **{**common, "extra": {**common["extra"], "patterns": PATTERNS,
          "batch_sizes": batch}})  # fmt: skip
