"""The fused rotary kernel gives the torch form's bits (CUDA, and the Triton interpreter on CPU)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

_SCRIPT = r"""
import torch
from pytest_invariance.engine.config import ModelConfig
from pytest_invariance.engine.rope import RoPE
from pytest_invariance.engine._rope_triton import rotate_query_key

dev = "{dev}"
for dtype in {dtypes}:
    for heads, kv_heads, d in ((4, 2, 16), (2, 2, 12), (8, 1, 32)):
        cfg = ModelConfig(hidden=heads * d, heads=heads, kv_heads=kv_heads, head_dim=d, max_position=512)
        rope = RoPE(cfg, torch.device(dev))
        g = torch.Generator().manual_seed(heads * 100 + d)
        t = 37
        qkv = (torch.randn(t, (heads + 2 * kv_heads) * d, generator=g) * 3).to(dtype).to(dev)
        pos = torch.randint(0, 512, (t,), generator=g).to(dev)
        q, k = rotate_query_key(qkv, pos, rope.cos, rope.sin, heads, kv_heads, d)
        q_dim, kv_dim = heads * d, kv_heads * d
        rq = rope(qkv[:, :q_dim].reshape(-1, heads, d), pos)
        rk = rope(qkv[:, q_dim : q_dim + kv_dim].reshape(-1, kv_heads, d), pos)
        iv = torch.int16 if dtype == torch.bfloat16 else torch.int32
        assert torch.equal(q.view(iv), rq.view(iv)), (dtype, heads, kv_heads, d, "q")
        assert torch.equal(k.view(iv), rk.view(iv)), (dtype, heads, kv_heads, d, "k")
        # a token's rotation is its own: the first row alone gives the same bits
        q1, k1 = rotate_query_key(qkv[:1].contiguous(), pos[:1], rope.cos, rope.sin, heads, kv_heads, d)
        assert torch.equal(q1.view(iv), q[:1].view(iv)) and torch.equal(k1.view(iv), k[:1].view(iv))
print("OK")
"""


def test_fused_rope_equals_torch_form_under_interpreter():
    """fp32 only: the interpreter's fp32 -> bf16 cast truncates (the GPU rounds to nearest even),
    so bf16 bits are checked on CUDA."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT.replace("{dev}", "cpu").replace("{dtypes}", "(torch.float32,)")], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_rope_equals_torch_form_on_cuda():
    exec(compile(_SCRIPT.replace("{dev}", "cuda").replace("{dtypes}", "(torch.bfloat16, torch.float32)"), "rope_check", "exec"), {})
