"""A local tokenizer.json adds BOS to text prompts as transformers (and so vLLM and SGLang) do.

The tokenizer is made in the test with the `tokenizers` package: no hub download. Which specials are
added is decided by an explicit ``add_bos_token``/``add_eos_token`` in tokenizer_config.json when
present, else by the file's ``post_processor``; token-id prompts are never changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import models, pre_tokenizers, processors  # noqa: E402

from pytest_invariance.engine.tokenizer import load_tokenizer  # noqa: E402

VOCAB = {"<unk>": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4}


def make_tokenizer(tmp: Path, bos_template: bool, config: dict | None = None) -> Path:
    """tokenizer.json (WordLevel, whitespace) with or without Llama's BOS template, and a config."""
    t = tokenizers.Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.add_special_tokens(["<s>", "</s>"])
    if bos_template:
        t.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
        )
    t.save(str(tmp / "tokenizer.json"))
    if config is not None:
        (tmp / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp


@pytest.mark.parametrize(
    "template, config, expected",
    [
        (True, None, [1, 3, 4]),  # Llama-style post_processor: BOS
        (False, None, [3, 4]),  # no post_processor (GPT-2 style): nothing added
        (False, {"add_bos_token": True, "bos_token": "<s>"}, [1, 3, 4]),
        (True, {"add_bos_token": False, "bos_token": "<s>"}, [3, 4]),  # the config rebuilds the template
        (False, {"add_bos_token": True, "add_eos_token": True, "bos_token": {"content": "<s>"},
                 "eos_token": "</s>"}, [1, 3, 4, 2]),  # fmt: skip
        (True, {"bos_token": "<s>"}, [1, 3, 4]),  # no flag: the post_processor decides
    ],
    ids=["template", "none", "config-adds", "config-removes", "config-bos-eos", "config-without-flag"],
)
def test_text_prompts_get_the_specials_transformers_adds(tmp_path, template, config, expected):
    tok = load_tokenizer(None, str(make_tokenizer(tmp_path, template, config)), eos_token_id=2, bos_token_id=None)
    assert tok.encode("hello world") == expected
    assert tok.decode(expected) == "hello world"  # specials are not text
    assert tok.bos_token_id == (1 if config else None)  # tokenizer_config names it


def test_add_bos_without_a_known_bos_token_is_an_error(tmp_path):
    make_tokenizer(tmp_path, False, {"add_bos_token": True})
    with pytest.raises(ValueError, match="add_bos_token is true but no bos token"):
        load_tokenizer(None, str(tmp_path), eos_token_id=None, bos_token_id=None)


def test_a_non_boolean_flag_is_an_error(tmp_path):
    make_tokenizer(tmp_path, False, {"add_bos_token": "yes"})
    with pytest.raises(ValueError, match="add_bos_token must be true or false"):
        load_tokenizer(None, str(tmp_path), eos_token_id=None, bos_token_id=None)


def test_server_adds_bos_to_text_prompts_only(tmp_path):
    pytest.importorskip("fastapi")
    requests = pytest.importorskip("requests")
    from pytest_invariance.engine.config import EngineConfig, ModelConfig
    from pytest_invariance.engine.server import ServerThread, create_app

    make_tokenizer(tmp_path, True)
    model = ModelConfig(hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_position=64)
    cfg = EngineConfig(model=model, tokenizer_path=str(tmp_path), max_num_seqs=4)
    with ServerThread(create_app(cfg)) as base:
        body = {"model": "x", "max_tokens": 1, "temperature": 0}
        text = requests.post(base + "/v1/completions", json={**body, "prompt": "hello world"}, timeout=60)
        ids = requests.post(base + "/v1/completions", json={**body, "prompt": [3, 4]}, timeout=60)
        gen = requests.post(base + "/generate", json={"text": "hello world", "sampling_params": {"max_new_tokens": 1}},
                            timeout=60)  # fmt: skip
    assert text.json()["choices"][0]["prompt_token_ids"] == [1, 3, 4]
    assert ids.json()["choices"][0]["prompt_token_ids"] == [3, 4]
    assert gen.json()["meta_info"]["prompt_tokens"] == 3
