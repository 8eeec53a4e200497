"""The bundled engine's model: default mode's designed M-bucket split-K is named; invariant mode is clean."""

from __future__ import annotations

import torch

from pytest_invariance.cli import main
from pytest_invariance.localize.bundled import BundledLM, before_run
from pytest_invariance.localize.run import localize


def _ids() -> torch.Tensor:  # 4 tokens a row: the probe alone is M=4 (split-K), batch 8 is M=32 (one pass)
    return torch.randint(0, 256, (8, 4), generator=torch.Generator().manual_seed(0))


def test_default_mode_names_the_split_k_projection_first() -> None:
    ids = _ids()
    res = localize(BundledLM(), ids[0], ids[1:], batch_sizes=(1, 8), positions=[0, 7], before_run=before_run)
    top = res.culprit
    assert top is not None and top["module"] == "model.layers.0.self_attn.qkv_proj" and top["batch_sizes"] == [8]
    assert not res.nondeterministic
    assert all(c.verdict.upstream_differing == 0 for c in res.configs if c.verdict.culprit)


def test_invariant_mode_is_clean_beside_default_mode_as_control(tmp_path, capsys) -> None:
    rc = main(["localize", "bundled-invariant", "--batch", "1,8", "--tokens", "4", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "verdict: invariant" in out and "no culprit" in out
    assert "control bundled default mode (M-bucket split-K, split-KV): named it" in out
