"""The linear-attention scan's Triton kernel is bitwise the same for a whole prefill, any chunking
of it and decode by construction: one compiled binary (no state variant, ``T`` not specialized)
with no FMA contraction. The H200 run of the first version diverged under chunking and at decode
while the interpreter agreed (it contracts nothing), so the binary's structure is checked here
on CPU: the PTX triton emits for sm_90, and the interpreter on pieces aligned to nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
triton = pytest.importorskip("triton")


def test_scan_kernel_has_one_specialization_for_prefill_pieces_and_decode():
    from pytest_invariance.reference_kernels.linear_attention_triton import _scan_kernel

    assert list(_scan_kernel.do_not_specialize) in (["T"], [_scan_kernel.arg_names.index("T")])
    assert [p.name for p in _scan_kernel.params if p.is_constexpr] == ["BLOCK_DK", "BLOCK_DV"]


def test_scan_kernel_ptx_for_sm90_rounds_every_multiply_and_add_on_its_own():
    from pytest_invariance.reference_kernels import linear_attention_triton as lat
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    types = ["*bf16", "*bf16", "*bf16", "*fp32", "*fp32", "*bf16", "*fp32", "i32", "i32", "i32", "i32"]
    sig = dict(zip(lat._scan_kernel.arg_names, [*types, "constexpr", "constexpr"], strict=True))
    src = ASTSource(lat._scan_kernel, sig, constexprs={"BLOCK_DK": 64, "BLOCK_DV": 32})
    try:
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                             options={"num_warps": lat.SCAN_WARPS, "enable_fp_fusion": lat.FP_FUSION}).asm["ptx"]  # fmt: skip
    except Exception as exc:  # no CUDA backend / ptxas in this triton build
        pytest.skip(f"triton cannot compile for sm_90 here: {type(exc).__name__}: {str(exc)[:120]}")
    assert re.search(r"\bmul\.[a-z.]*f32", ptx) and not re.search(r"\bfma\.[a-z.]*f32", ptx)


_INTERPRET_SCRIPT = textwrap.dedent(
    """
    import torch
    from pytest_invariance.reference_kernels import linear_attention as la
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 19, 2, 8, generator=g).bfloat16() for _ in range(3))
    gg = -(torch.rand(2, 19, 2, generator=g) * 0.3 + 0.01)
    o, s = la.scan(q, k, v, gg, backend="interpret")
    outs, st, lo = [], None, 0
    for n in (5, 1, 7, 3, 1, 2):  # pieces aligned to nothing, decode steps among them
        oi, st = la.scan(q[:, lo:lo + n], k[:, lo:lo + n], v[:, lo:lo + n], gg[:, lo:lo + n], st, backend="interpret")
        outs.append(oi)
        lo += n
    assert lo == 19
    assert torch.equal(torch.cat(outs, 1).view(torch.int16), o.view(torch.int16))
    assert torch.equal(st.view(torch.int32), s.view(torch.int32))
    ot, stt = la.scan(q, k, v, gg, backend="torch")
    assert (ot.float() - o.float()).abs().max() <= 2 ** -6 * o.float().abs().max()
    print("OK")
    """
)


def test_interpreted_scan_pieces_aligned_to_nothing_equal_the_whole_prefill_bitwise():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", _INTERPRET_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr
