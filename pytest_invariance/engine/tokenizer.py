"""Tokenizers: byte-level by default, a local `tokenizer.json` when one is given or found.

The byte tokenizer needs no files and round-trips any UTF-8 text exactly; the `tokenizers` package
is optional and imported only when a tokenizer.json is actually used.
"""

from __future__ import annotations

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
    """A Hugging Face `tokenizer.json` through the `tokenizers` package (no special tokens added)."""

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
        self.eos_token_id = eos_token_id
        self.bos_token_id = bos_token_id
        self.name = str(path)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)


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
