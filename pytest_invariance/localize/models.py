"""Models users have, as (module, call, probe maker): a local Hugging Face directory, the bundled
engine's model, or any ``nn.Module``.

Hugging Face models load with ``local_files_only=True``: nothing is ever downloaded. Their forward
is called with ``use_cache=False`` so no cache object carries state from one run to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class ModelError(ValueError):
    """A model that cannot be loaded or called here (one line)."""


@dataclass
class Loaded:
    """A model ready to localize: ``call(model, ids[B, T])`` runs it; ``vocab`` bounds the probe ids."""

    name: str
    model: Any
    call: Any
    vocab: int
    device: torch.device
    dtype: torch.dtype
    before_run: Any = None  # localize's hook (the bundled engine places the probe's cache blocks)


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ModelError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}") from None


def hf_call(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """Logits of a causal LM for token ids ``[B, T]`` (no cache, no padding)."""
    return model(input_ids=ids, use_cache=False).logits


def load_hf(path: str | Path, *, device: str = "cpu", dtype: str = "fp32") -> Loaded:
    """A causal LM from a local directory (config.json + weights), never downloading."""
    p = Path(path)
    if not (p / "config.json").is_file():
        raise ModelError(f"{path}: no config.json (expected a local Hugging Face model directory)")
    try:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise ModelError("loading a Hugging Face model needs transformers: pip install 'pytest-invariance[hf]'") from None
    hf_logging.disable_progress_bar()  # stderr stays for our one-line errors
    dt = parse_dtype(dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(p), local_files_only=True, dtype=dt)
    except (OSError, ValueError, KeyError) as e:
        raise ModelError(f"{path}: cannot load: {str(e).splitlines()[0]}") from None
    dev = _device(device)
    model = model.to(dev).eval()
    return Loaded(p.name, model, hf_call, int(model.config.vocab_size), dev, dt)


def _device(name: str) -> torch.device:
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ModelError(f"unknown device {name!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"device {name!r}: CUDA is not available here")
    return dev


def token_rows(vocab: int, length: int, rows: int, seed: int, device: torch.device) -> torch.Tensor:
    """``rows`` random token sequences ``[rows, length]`` (row 0 is the probe), from ``seed``."""
    g = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, vocab, (rows, length), generator=g).to(device)


# Random-weight Llama shapes built in memory (nothing saved or downloaded): ``random-llama:NAME``.
RANDOM_LLAMA = {
    "tiny": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256),
    "llama3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0),
}  # fmt: skip


def random_llama(preset: str, *, device: str = "cpu", dtype: str = "fp32", seed: int = 0) -> Loaded:
    """A Llama of ``preset``'s shapes with seeded random weights, built on ``device``."""
    if preset not in RANDOM_LLAMA:
        raise ModelError(f"unknown random-llama preset {preset!r}; expected one of {', '.join(RANDOM_LLAMA)}")
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        raise ModelError("random-llama needs transformers: pip install 'pytest-invariance[hf]'") from None
    dev, dt = _device(device), parse_dtype(dtype)
    torch.manual_seed(seed)
    with dev:
        model = LlamaForCausalLM(LlamaConfig(**RANDOM_LLAMA[preset])).to(dt).eval()
    return Loaded(f"random-llama-{preset}", model, hf_call, RANDOM_LLAMA[preset]["vocab_size"], dev, dt)


def bundled(spec: str, *, device: str = "cpu") -> Loaded:
    """``bundled[-invariant][:PRESET]``: the bundled engine's model (synthetic weights, its own dtype),
    one prefill step, in default mode or in its invariant mode."""
    from pytest_invariance.engine.config import PRESETS

    head, _, preset = spec.partition(":")
    preset = preset or "demo"
    if preset not in PRESETS:
        raise ModelError(f"unknown bundled preset {preset!r}; expected one of {', '.join(PRESETS)}")
    from .bundled import BundledLM, before_run

    dev = _device(device)
    cfg = PRESETS[preset]()
    lm = BundledLM(cfg, invariant=head == "bundled-invariant", device=str(dev))
    return Loaded(f"{head}-{preset}", lm, lambda m, ids: m(ids), cfg.vocab_size, dev, parse_dtype("bf16")
                  if cfg.dtype == "bfloat16" else torch.float32, before_run)  # fmt: skip


def load(spec: str, *, device: str = "cpu", dtype: str = "fp32", seed: int = 0) -> Loaded:
    """``random-llama:PRESET``, ``bundled[-invariant][:PRESET]`` or a local Hugging Face directory."""
    if spec.split(":")[0] in ("bundled", "bundled-invariant"):
        return bundled(spec, device=device)
    if spec.startswith("random-llama:"):
        return random_llama(spec.split(":", 1)[1], device=device, dtype=dtype, seed=seed)
    if not Path(spec).is_dir():
        raise ModelError(f"{spec}: not a directory (expected a local Hugging Face model directory, random-llama:PRESET or bundled[-invariant][:PRESET])")
    return load_hf(spec, device=device, dtype=dtype)
