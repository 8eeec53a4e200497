"""The fused-merge decode kernel fits the H200's shared memory at every sweep candidate: compiled for sm_90 on the
CPU (Triton's NVIDIA backend and its bundled ptxas; nothing launched).

Session 8's fused-merge candidates all failed on the device with 234,752 B > 232,448 B: the merge
pipelined 8 loads of the whole 64 x 128 fp32 tile. The compiled figure is exact on the CPU, so this
catches that class of failure before a device run."""

from __future__ import annotations

import os
import subprocess
import sys

SM90_SHARED_LIMIT = 232_448  # bytes a block may opt into on sm_90 (H100/H200)

_SCRIPT = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from pytest_invariance.reference_kernels.attention import triton_attn as ta

fn = ta._attn_kernel
ptrs = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "Out": "*bf16", "Mp": "*fp32", "Lp": "*fp32", "Op": "*fp32",
        **dict.fromkeys(("BT", "Count", "tile_seq", "tile_tok0", "q_start", "len_q", "kv_start", "kv_len"), "*i32")}
for fused, stages in ((True, 3), (True, 4)):  # the default decode stages and the deepest candidate
    consts = {"G": 4, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_D": 128, "CAUSAL": True, "PAGED": True, "PAGE": 16,
              "DECODE": True, "IEEE": False, "EVEN_D": True, "FUSED_MERGE": fused, "MERGE_STAGES": ta.MERGE_STAGES,
              "TMA": False, "MERGE_ROWS": 4}
    sig = {n: "constexpr" if n in consts else "fp32" if n == "qk_scale" else ptrs.get(n, "i32") for n in fn.arg_names}
    src = ASTSource(fn, sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": stages})
    print(f"fused={fused} stages={stages} shared={k.metadata.shared}")
"""


def test_decode_kernel_fits_sm90_shared_memory_with_and_without_fused_merge() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    figures = [line for line in proc.stdout.splitlines() if "shared=" in line]
    print("\n".join(figures))
    assert len(figures) == 2
    for line in figures:
        assert int(line.rsplit("=", 1)[1]) <= SM90_SHARED_LIMIT, line
