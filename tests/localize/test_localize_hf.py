"""A tiny random Llama saved locally with ``transformers``: localization and the CLI on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from pytest_invariance.reference_kernels import enable  # noqa: E402

from pytest_invariance.cli import main  # noqa: E402
from pytest_invariance.localize.models import load_hf, token_rows  # noqa: E402
from pytest_invariance.localize.plant import plant  # noqa: E402
from pytest_invariance.localize.run import localize  # noqa: E402

PLANTED = "model.layers.0.self_attn.q_proj"  # upstream: embedding, rotary tables, an RMSNorm (routed)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-llama")
    transformers.LlamaForCausalLM(cfg).save_pretrained(out)
    return out


def test_planted_projection_is_named_and_nothing_upstream_differs(llama_dir: Path) -> None:
    m = load_hf(llama_dir)
    ids = token_rows(m.vocab, 8, 8, seed=0, device=m.device)
    with enable():
        res = localize(plant(m.model, PLANTED), ids[0], ids[1:], batch_sizes=(8,), call=m.call)
    assert [c.verdict.culprit.path for c in res.configs] == [PLANTED, PLANTED]
    for c in res.configs:  # every event that completed before the plant was bitwise equal
        assert c.verdict.upstream_differing == 0
        # the split loop inside the plant is the only call whose ops could not be paired (HF's extra
        # expand of the position ids in a batch is paired around: data movement only)
        assert [t.split(":")[0] for t in c.coarse] == [PLANTED]


def test_cli_names_the_planted_module_and_writes_records(llama_dir: Path, tmp_path: Path, capsys) -> None:
    rc = main(["localize", str(llama_dir), "--batch", "1,8", "--tokens", "8", "--under-reference", "--no-control",
               "--plant", PLANTED, "--out", str(tmp_path), "--report"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 1 and f"| {PLANTED} | " in out and "verdict: divergent" in out
    (rec,) = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert rec["oracle"] == "localize" and rec["mode"] == "invariant"
    assert rec["evidence"]["culprit"]["module"] == PLANTED and rec["evidence"]["differing_batch_sizes"] == [8]
    assert (tmp_path / "matrix.md").is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["/nonexistent/model"], "/nonexistent/model: not a directory"),
        (["LLAMA", "--batch", "1,x"], "--batch '1,x': expected comma-separated integers"),
        (["LLAMA", "--dtype", "fp64"], "unknown dtype 'fp64'"),
        (["LLAMA", "--plant", "model.nope"], "--plant model.nope: model has no submodule 'model.nope'"),
        (["LLAMA", "--greedy", "-1"], "--greedy -1: expected a positive integer"),
        (["bundled", "--greedy", "2", "--tokens", "2"], "--greedy: bundled has no generate"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(llama_dir: Path, tmp_path: Path, capsys, argv, message) -> None:
    argv = [str(llama_dir) if a == "LLAMA" else a for a in argv]
    assert main(["localize", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_under_enable_the_tiny_llama_has_no_culprit_at_1_8_64(llama_dir: Path) -> None:
    # SDPA is routed too (reference_kernels.attention.sdpa); what is left stock is elementwise.
    m = load_hf(llama_dir)
    ids = token_rows(m.vocab, 4, 64, seed=1, device=m.device)
    with enable():
        res = localize(m.model, ids[0], ids[1:], batch_sizes=(1, 8, 64), call=m.call)
    assert res.culprit is None and not res.diverged, res.culprits
    assert all(c.verdict.output_equal is True and not c.coarse for c in res.configs)


def test_under_enable_the_tiny_llama_has_1_unique_greedy_completion_at_1_8_64(llama_dir: Path) -> None:
    """Greedy ``generate`` (KV cache) of the probe alone and among 7 / 63 other prompts: one completion
    by token ids and by every step's logits bits. The control, the same model with its first
    projection planted with the split-K mutant, must differ: in logits bits (its margins are too
    wide for one rounding to flip a token here), so the check is one that can fail."""
    from pytest_invariance.localize.greedy import greedy_completions, loop_greedy

    m = load_hf(llama_dir)
    ids = token_rows(m.vocab, 8, 64, seed=1, device=m.device)
    with enable():
        res = greedy_completions(m.model, ids[0], ids[1:], batch_sizes=(1, 8, 64), new_tokens=6)
        ctl = greedy_completions(plant(m.model, PLANTED), ids[0], ids[1:], batch_sizes=(1, 8, 64), new_tokens=6)
        loop = greedy_completions(m.model, ids[0], ids[1:], batch_sizes=(8,), new_tokens=3, generate=loop_greedy(m.call))
    assert list(res.completions) == ["alone", "1@0", "8@0", "8@7", "64@0", "64@63"]
    assert res.unique == 1 and res.unique_bitwise == 1 and not res.differing, res.describe()
    assert ctl.diverged and {"8@0", "64@0"} <= set(ctl.differing), ctl.describe()
    assert "1@0" not in ctl.differing  # the mutant is deterministic: alone twice is the same
    assert loop.unique_bitwise == 1 and list(loop.completions) == ["alone", "8@0", "8@7"]


def test_cli_greedy_under_reference_is_invariant_against_its_planted_control(llama_dir: Path, tmp_path: Path, capsys) -> None:
    rc = main(["localize", str(llama_dir), "--batch", "1,8", "--tokens", "8", "--under-reference", "--greedy", "4",
               "--out", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and "4 greedy completions of 4 tokens: 1 unique (token ids), 1 unique (token ids + logits bits)" in out
    assert "verdict: invariant" in out and "control planted splitk-matmul at model.layers.0.self_attn.q_proj" in out
    (rec,) = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert rec["oracle"] == "unique-samples" and rec["mode"] == "invariant" and rec["evidence"]["unique_bitwise"] == 1
    assert rec["control"]["diverged"] is True and rec["control"]["evidence"]["unique_bitwise"] > 1
