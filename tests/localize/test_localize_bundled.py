"""The bundled engine's model: default mode's designed M-bucket split-K is named; invariant mode is clean."""

from __future__ import annotations

import torch

from pytest_invariance.cli import main
from pytest_invariance.engine.config import ModelConfig
from pytest_invariance.localize.bundled import BundledLM, before_run
from pytest_invariance.localize.run import localize

GEMMS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj", "lm_head")


def _ids() -> torch.Tensor:  # 4 tokens a row: the probe alone is M=4 (split-K), batch 8 is M=32 (one pass)
    return torch.randint(0, 256, (8, 4), generator=torch.Generator().manual_seed(0))


def test_default_mode_names_a_split_k_gemm_first() -> None:
    # Which GEMM's split-K moves a bf16 bit first depends on fp32 partials from the host's BLAS;
    # that the culprit is an M-bucket GEMM, at batch 8 (M 4 -> 32) and not at 1, does not.
    cfg = ModelConfig(hidden=512, layers=1, heads=4, kv_heads=2, head_dim=128, intermediate=1024)
    ids = _ids()
    res = localize(BundledLM(cfg), ids[0], ids[1:], batch_sizes=(1, 8), positions=[0, 7], before_run=before_run)
    top = res.culprit
    assert top is not None and top["module"].endswith(GEMMS) and top["batch_sizes"] == [8], top
    assert not res.nondeterministic
    assert all(c.verdict.upstream_differing == 0 for c in res.configs if c.verdict.culprit)


def test_invariant_mode_is_clean_beside_default_mode_as_control(tmp_path, capsys) -> None:
    rc = main(["localize", "bundled-invariant", "--batch", "1,8", "--positions", "0", "--tokens", "4", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "verdict: invariant" in out and "no culprit" in out
    assert "control bundled default mode (M-bucket split-K, split-KV): named it" in out
