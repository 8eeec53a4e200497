"""Make a tiny random Llama-style model and a byte-level BPE tokenizer, locally (no hub download).

Why: real engines (vLLM CPU, ``transformers serve``) need a model directory in the Hugging Face
layout; a hub download is not allowed here, and a small model keeps CPU serving fast. The weights
are random (seeded), which is all a batch-invariance test needs: the question is whether the same
arithmetic gives the same bits, not whether the text makes sense.

Usage: python scripts/tiny_llama.py OUT_DIR [--hidden 128] [--layers 2] [--vocab 2048]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

_WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma "
          "tau upsilon phi chi psi omega the quick brown fox jumps over lazy dog batch invariance kernel "
          "token prompt engine request logprob prefix cache decode prefill").split()  # fmt: skip


def corpus(n_lines: int = 4000, seed: int = 0) -> list[str]:
    """Seeded word salad plus printable ASCII, so every byte and the sweeps' words get tokens."""
    rng = random.Random(seed)
    lines = ["".join(chr(c) for c in range(32, 127))]
    for i in range(n_lines):
        lines.append(f"[{i}] " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 40))))
    return lines


def make_tokenizer(out: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)  # fmt: skip
    tok.train_from_iterator(corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])  # fmt: skip
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    fast.save_pretrained(out)


def make_model(out: Path, hidden: int, layers: int, vocab: int, dtype: str, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, num_attention_heads=max(hidden // 32, 1),
                      num_key_value_heads=max(hidden // 64, 1), max_position_embeddings=4096,
                      bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)  # fmt: skip
    model = LlamaForCausalLM(cfg).to(getattr(torch, dtype))
    model.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32", "float16"))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    make_tokenizer(out, a.vocab)
    make_model(out, a.hidden, a.layers, a.vocab, a.dtype, a.seed)
    meta = {"hidden": a.hidden, "layers": a.layers, "vocab": a.vocab, "dtype": a.dtype, "seed": a.seed}
    (out / "tiny_llama.json").write_text(json.dumps(meta) + "\n")
    print(f"tiny_llama: {out} {meta}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
