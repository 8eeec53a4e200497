"""Tokenizers: byte-level by default, a local `tokenizer.json` when one is given or found.

The byte tokenizer needs no files and round-trips any UTF-8 text exactly; the `tokenizers` package
is optional and imported only when a tokenizer.json is actually used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from .config import BOS_ID, BYTE_VOCAB_SIZE, EOS_ID, PAD_ID


class Tokenizer(Protocol):
    eos_token_id: int | None
    bos_token_id: int | None
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class ByteTokenizer:
    """One token per UTF-8 byte (ids 0..255) plus <bos>, <eos>, <pad>."""

    bos_token_id = BOS_ID
    eos_token_id = EOS_ID
    pad_token_id = PAD_ID
    vocab_size = BYTE_VOCAB_SIZE
    name = "bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face `tokenizer.json` through the `tokenizers` package, adding special tokens as
    transformers does for a text prompt (and so vLLM and SGLang, which encode with it).

    Which specials: an explicit boolean ``add_bos_token`` / ``add_eos_token`` in a
    ``tokenizer_config.json`` beside the file wins (transformers rebuilds the post-processor from
    them: BOS, the text, EOS); otherwise the file's own ``post_processor`` decides (Llama's
    TemplateProcessing adds BOS; a file without one adds nothing). Token-id prompts are never changed.
    """

    def __init__(self, path: Path, eos_token_id: int | None = None, bos_token_id: int | None = None):
        try:
            from tokenizers import Tokenizer as _Tok
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                f"{path} needs the `tokenizers` package (pip install tokenizers), "
                "or pass no tokenizer path to use the byte-level tokenizer"
            ) from e
        self._tok = _Tok.from_file(str(path))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        config = _tokenizer_config(path)
        # BOS as transformers adds it: the tokenizer's own bos_token first; EOS (which stops
        # generation) as the model's config names it first.
        tok_bos, tok_eos = self._special_id(config, "bos_token"), self._special_id(config, "eos_token")
        self.bos_token_id = tok_bos if tok_bos is not None else bos_token_id
        self.eos_token_id = eos_token_id if eos_token_id is not None else tok_eos
        self._added_eos = tok_eos if tok_eos is not None else eos_token_id
        self.add_bos = _flag(config, "add_bos_token", path)
        self.add_eos = _flag(config, "add_eos_token", path)
        for flag, tid, what in ((self.add_bos, self.bos_token_id, "bos"), (self.add_eos, self._added_eos, "eos")):
            if flag and tid is None:
                raise ValueError(f"{path.parent / 'tokenizer_config.json'}: add_{what}_token is true but no {what} token is known")
        self.name = str(path)

    def _special_id(self, config: dict, key: str) -> int | None:
        """Id of tokenizer_config's ``bos_token``/``eos_token`` (a string or ``{"content": ...}``)."""
        tok = config.get(key)
        if isinstance(tok, dict):
            tok = tok.get("content")
        return self._tok.token_to_id(tok) if isinstance(tok, str) else None

    def encode(self, text: str) -> list[int]:
        if self.add_bos is None and self.add_eos is None:
            return list(self._tok.encode(text, add_special_tokens=True).ids)
        ids = list(self._tok.encode(text, add_special_tokens=False).ids)
        return [self.bos_token_id] * bool(self.add_bos) + ids + [self._added_eos] * bool(self.add_eos)  # type: ignore[list-item]

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)


def _tokenizer_config(path: Path) -> dict:
    """``tokenizer_config.json`` beside the tokenizer file, or {} when there is none."""
    p = path.parent / "tokenizer_config.json"
    if not p.is_file():
        return {}
    try:
        config = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: not readable JSON ({e})") from None
    return config if isinstance(config, dict) else {}


def _flag(config: dict, key: str, path: Path) -> bool | None:
    """An explicit boolean of tokenizer_config (None when absent or null: the post-processor decides)."""
    value = config.get(key)
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{path.parent / 'tokenizer_config.json'}: {key} must be true or false, got {value!r}")
    return value


def load_tokenizer(
    tokenizer_path: str | None, model_path: str | None, eos_token_id: int | None, bos_token_id: int | None
) -> ByteTokenizer | HFTokenizer:
    """tokenizer_path (file or dir) wins; else model_path/tokenizer.json if present; else bytes."""
    for base in (tokenizer_path, model_path):
        if not base:
            continue
        p = Path(base)
        if p.is_dir():
            p = p / "tokenizer.json"
        if p.is_file():
            return HFTokenizer(p, eos_token_id=eos_token_id, bos_token_id=bos_token_id)
        if base is tokenizer_path:
            raise FileNotFoundError(f"tokenizer not found: {p}")
    return ByteTokenizer()
