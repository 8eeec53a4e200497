"""Model weights: seeded synthetic weights from integer bits, or a local safetensors directory.

Synthetic weights are derived from splitmix64 over (seed, tensor name, element index) in numpy
uint64 arithmetic and mapped to floats with exact operations only (24-bit integers, a power-of-two
division, one correctly rounded float32 multiply, one round-to-nearest-even cast), so the bytes are
identical on every platform and library version: no library RNG stream is involved.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from .config import ModelConfig

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def torch_dtype(name: str) -> torch.dtype:
    """Map a dtype name from the config to torch."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r}; choose one of {sorted(_DTYPES)}") from None


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def name_key(seed: int, name: str) -> np.uint64:
    """64-bit key of (seed, tensor name): FNV-1a over the name, mixed with the seed."""
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    mixed = splitmix64(np.array([h ^ (seed & 0xFFFFFFFFFFFFFFFF)], dtype=np.uint64))
    return mixed[0]


def counter_uniform(key: np.uint64, start: int, n: int) -> np.ndarray:
    """Uniform float32 values in [-1, 1) with 24 random bits each, for counters start..start+n-1."""
    return uniform_at(key, np.arange(start, start + n, dtype=np.uint64))


def uniform_at(key: np.uint64, idx: np.ndarray) -> np.ndarray:
    """`counter_uniform` at arbitrary uint64 counters: any subset of a tensor, the same bits."""
    with np.errstate(over="ignore"):
        bits = splitmix64(idx * _GOLDEN ^ key)
    top = (bits >> np.uint64(40)).astype(np.int64) - (1 << 23)  # exact integers in [-2^23, 2^23)
    return top.astype(np.float32) * np.float32(2.0**-23)


def synthetic_tensor(seed: int, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
    """One tensor, uniform with the given std: bit-identical everywhere for the same arguments."""
    n = math.prod(shape)
    key = name_key(seed, name)
    scale = np.float32(std * math.sqrt(3.0))
    out = np.empty(n, dtype=np.float32)
    step = 1 << 22
    for s in range(0, n, step):
        out[s : s + step] = counter_uniform(key, s, min(step, n - s)) * scale
    return out.reshape(shape)


def synthetic_rows(cfg: ModelConfig, name: str, rows: list[int]) -> torch.Tensor:
    """Rows of the synthetic [vocab_size, hidden] matrix `name`, in the model dtype, without building
    the matrix: bit-identical to the same rows of the full tensor (its counters are row * hidden + j).
    Serves reserved ids, whose embedding rows only a prompt that holds them needs."""
    h = cfg.hidden
    idx = (np.asarray(rows, dtype=np.uint64)[:, None] * np.uint64(h) + np.arange(h, dtype=np.uint64)).ravel()
    scale = np.float32(_std(cfg, name, (cfg.vocab_size, h)) * math.sqrt(3.0))
    vals = uniform_at(name_key(cfg.seed, name), idx) * scale
    return torch.from_numpy(vals.reshape(len(rows), h)).to(torch_dtype(cfg.dtype))


def _std(cfg: ModelConfig, name: str, shape: tuple[int, ...]) -> float:
    """Init std of a synthetic tensor: 0.02 for biases, weight_scale for the embedding, else /sqrt(fan_in)."""
    if name.endswith(".bias"):
        return 0.02
    if name == "model.embed_tokens.weight":
        return cfg.weight_scale
    return cfg.weight_scale / math.sqrt(shape[-1])


def _i64(v: int) -> int:
    """A uint64 constant as the int64 with the same bits."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _srl(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def synthetic_tensor_torch(
    seed: int, name: str, shape: tuple[int, ...], std: float, device: torch.device
) -> torch.Tensor:
    """`synthetic_tensor` computed on `device` in int64 two's-complement arithmetic: the same bits,
    fast enough for 8B-parameter benchmark models on a GPU (callers verify against numpy)."""
    n = math.prod(shape)
    key = _i64(int(name_key(seed, name)))
    golden, m1, m2 = _i64(int(_GOLDEN)), _i64(int(_M1)), _i64(int(_M2))
    scale = torch.tensor(std * math.sqrt(3.0), dtype=torch.float32).item()  # round to float32 once
    out = torch.empty(n, dtype=torch.float32, device=device)
    step = 1 << 26
    for s0 in range(0, n, step):
        x = torch.arange(s0, min(n, s0 + step), dtype=torch.int64, device=device) * golden ^ key
        z = x + golden
        z = (z ^ _srl(z, 30)) * m1
        z = (z ^ _srl(z, 27)) * m2
        z = z ^ _srl(z, 31)
        top = _srl(z, 40) - (1 << 23)
        out[s0 : s0 + x.numel()] = (
            top.to(torch.float32) * (2.0**-23) * torch.tensor(scale, dtype=torch.float32, device=device)
        )
    return out.reshape(shape)


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Canonical (Hugging Face Llama / Qwen2-MoE style) names and shapes, in a fixed order."""
    h, q, kv = cfg.hidden, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, h)}
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_proj.weight"] = (q, h)
        shapes[p + "self_attn.k_proj.weight"] = (kv, h)
        shapes[p + "self_attn.v_proj.weight"] = (kv, h)
        if cfg.attention_bias:
            shapes[p + "self_attn.q_proj.bias"] = (q,)
            shapes[p + "self_attn.k_proj.bias"] = (kv,)
            shapes[p + "self_attn.v_proj.bias"] = (kv,)
        shapes[p + "self_attn.o_proj.weight"] = (h, q)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        if cfg.is_moe_layer(i):
            ei = cfg.expert_intermediate
            shapes[p + "mlp.gate.weight"] = (cfg.n_experts, h)
            for e in range(cfg.n_experts):
                shapes[p + f"mlp.experts.{e}.gate_proj.weight"] = (ei, h)
                shapes[p + f"mlp.experts.{e}.up_proj.weight"] = (ei, h)
                shapes[p + f"mlp.experts.{e}.down_proj.weight"] = (h, ei)
        else:
            shapes[p + "mlp.gate_proj.weight"] = (cfg.intermediate, h)
            shapes[p + "mlp.up_proj.weight"] = (cfg.intermediate, h)
            shapes[p + "mlp.down_proj.weight"] = (h, cfg.intermediate)
    shapes["model.norm.weight"] = (h,)
    if not cfg.tie_embeddings:
        shapes["lm_head.weight"] = (cfg.output_vocab, h)
    return shapes


def synthetic_weights(
    cfg: ModelConfig, device: str | torch.device | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) in the model dtype. Norm weights are 1, biases small, the rest ~1/sqrt(fan_in).

    With a CUDA `device` the bits are generated there (same values, see `synthetic_tensor_torch`).
    """
    dtype = torch_dtype(cfg.dtype)
    dev = torch.device(device) if device is not None else None
    for name, shape in param_shapes(cfg).items():
        if name.endswith("norm.weight"):
            yield name, torch.ones(shape, dtype=dtype, device=dev)
            continue
        std = _std(cfg, name, shape)
        if name == "model.embed_tokens.weight":
            shape = (cfg.output_vocab, shape[1])  # reserved rows: `synthetic_rows` on lookup
        if dev is not None and dev.type == "cuda":
            t = synthetic_tensor_torch(cfg.seed, name, shape, std, dev)
        else:
            t = torch.from_numpy(synthetic_tensor(cfg.seed, name, shape, std))
        if name == "lm_head.weight" and cfg.lm_head_shared:
            t = t + torch.from_numpy(lm_head_shared_row(cfg)).to(t.device)
        yield name, t.to(dtype)


def lm_head_shared_row(cfg: ModelConfig) -> np.ndarray:
    """The direction every LM-head row shares (fp32, [hidden]), ``lm_head_shared`` logit stds long.

    Real LM heads share a large common component (the frequency direction), so logits sit far from
    zero and bf16 logits land on a coarse grid where the top two are often one ULP apart or tied.
    Random rows alone give logits around zero and margins of many ULPs, so a one-ULP change of the
    hidden state almost never changes a greedy token. Added in fp32, element-wise: the same bits on
    every platform and device."""
    u = synthetic_tensor(cfg.seed, "lm_head.shared_direction", (cfg.hidden,), 1.0).astype(np.float64)
    row = cfg.lm_head_shared * cfg.weight_scale * u / math.sqrt(math.fsum(u * u))  # exactly rounded, no BLAS
    return row.astype(np.float32)


# --- safetensors (format: u64 little-endian header length, JSON header, raw little-endian bytes) ---

_ST_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F64": torch.float64,
    "I64": torch.int64,
    "I32": torch.int32,
}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Parse one .safetensors file without the `safetensors` package."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out: dict[str, torch.Tensor] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {meta['dtype']}")
        start, end = meta["data_offsets"]
        buf = bytearray(data[base + start : base + end])
        t = torch.frombuffer(buf, dtype=_ST_DTYPES[meta["dtype"]]) if buf else torch.empty(0)
        out[name] = t.reshape(meta["shape"])
    return out


def write_safetensors(path: str | Path, tensors: dict[str, torch.Tensor]) -> None:
    """Write tensors in the safetensors layout (used by tests to build a tiny HF directory)."""
    header: dict[str, dict] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {
            "dtype": _ST_NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    hbytes = json.dumps(header).encode()
    hbytes += b" " * (-len(hbytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for c in chunks:
            f.write(c)


def _canonical(name: str) -> str:
    """Map Mixtral expert names (block_sparse_moe, w1/w2/w3) onto the canonical Qwen2-MoE ones."""
    if ".block_sparse_moe." in name:
        name = name.replace(".block_sparse_moe.", ".mlp.")
        name = name.replace(".w1.", ".gate_proj.").replace(".w3.", ".up_proj.").replace(".w2.", ".down_proj.")
    return name


def load_hf_weights(path: str | Path, cfg: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield canonical (name, tensor) from every *.safetensors file of a local HF directory."""
    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors file in {path}")
    wanted = param_shapes(cfg)
    seen: set[str] = set()
    dtype = torch_dtype(cfg.dtype)
    for f in files:
        for name, t in read_safetensors(f).items():
            name = _canonical(name)
            if name not in wanted:
                if "rotary_emb" in name:
                    continue
                raise ValueError(
                    f"{f.name}: unexpected tensor {name} (shared experts and other extras are not supported)"
                )
            if tuple(t.shape) != wanted[name]:
                raise ValueError(
                    f"{f.name}: {name} has shape {tuple(t.shape)}, config expects {wanted[name]}"
                )
            seen.add(name)
            yield name, t.to(dtype)
    missing = sorted(set(wanted) - seen)
    if missing:
        raise ValueError(f"{path}: missing tensors, e.g. {missing[:3]}")
