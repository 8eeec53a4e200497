"""Direct launches (``reference_kernels.launch``) give the JIT launch's bits, and never run where a
plan could be stale: under the interpreter, with launch hooks, or for another alignment."""

from __future__ import annotations

import pytest
import torch
from pytest_invariance.reference_kernels import launch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_alignment_is_part_of_the_key():
    t = torch.zeros(64, dtype=torch.bfloat16)
    assert launch.aligned(t, t[1:], None) == (t.data_ptr() % 16 == 0, False, False)


def test_interpreter_launches_keep_no_plans():
    from pytest_invariance.reference_kernels import matmul_triton as mt

    a = torch.randn(1, 5, 16).to(torch.bfloat16)
    b = torch.randn(1, 16, 8).to(torch.bfloat16)
    mt.bmm_triton(a, b)
    mt.bmm_triton(a, b)
    assert all(not lk.plans for lk in mt._launchers.values())


def _fresh_jit(fn, *args, **kw):
    """``fn`` with every plan dropped first, so the JIT launches (and replans) it."""
    from pytest_invariance.reference_kernels import _rowops_triton as rt
    from pytest_invariance.reference_kernels import matmul_triton as mt
    from pytest_invariance.reference_kernels.attention import triton_attn as ta

    for mod in (mt, rt, ta):
        for lk in mod._launchers.values():
            lk.plans.clear()
    return fn(*args, **kw)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("m,k,n", [(1, 4096, 14336), (8, 4096, 6144), (64, 4096, 4096), (512, 4096, 6144),
                                   (300, 1024, 3072)])  # fmt: skip
def test_planned_linear_equals_the_jit_launch(m, k, n):
    from pytest_invariance.reference_kernels.matmul import linear

    g = torch.Generator(device="cuda").manual_seed(m)
    w = torch.randn(n, k, generator=g, device="cuda").to(torch.bfloat16)
    for trial in range(2):  # the second trial's inputs are new: the plan serves other values
        x = torch.randn(m, k, generator=g, device="cuda").to(torch.bfloat16)
        want = _fresh_jit(linear, x, w)
        got = linear(x, w)  # planned now
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), f"trial {trial}"
    bias = torch.randn(n, generator=g, device="cuda").to(torch.bfloat16)
    assert torch.equal(linear(x, w, bias).view(torch.int16), _fresh_jit(linear, x, w, bias).view(torch.int16))


@pytest.mark.gpu
@cuda
def test_planned_row_ops_and_decode_equal_the_jit_launch():
    from pytest_invariance.reference_kernels import attention, rowops

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(7, 4096, generator=g, device="cuda").to(torch.bfloat16)
    w = torch.randn(4096, generator=g, device="cuda").to(torch.bfloat16)
    want = _fresh_jit(rowops.rms_norm, x, w, 1e-5)
    assert torch.equal(rowops.rms_norm(x, w, 1e-5).view(torch.int16), want.view(torch.int16))
    kc = torch.randn(40, 16, 8, 128, generator=g, device="cuda").to(torch.bfloat16)
    vc = torch.randn(40, 16, 8, 128, generator=g, device="cuda").to(torch.bfloat16)
    q = torch.randn(3, 32, 128, generator=g, device="cuda").to(torch.bfloat16)
    bt = torch.arange(39, device="cuda", dtype=torch.int32).view(3, 13)
    sl = torch.tensor([200, 7, 208], device="cuda", dtype=torch.int32)
    want = _fresh_jit(attention.decode_paged, q, kc, vc, bt, sl)
    got = attention.decode_paged(q, kc, vc, bt, sl)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("m,bias", [(1, False), (8, True), (3, True)])
def test_splitk_reduction_kernel_equals_the_torch_chain(m, bias):
    """The M-bucket mutant's one-launch reduction adds the fp32 partials in the torch chain's order."""
    from pytest_invariance.reference_kernels.mutants.splitk_reduce_triton import reduce_partials

    g = torch.Generator(device="cuda").manual_seed(m)
    p = torch.randn(4, m, 6144, generator=g, device="cuda")
    b = torch.randn(6144, generator=g, device="cuda").to(torch.bfloat16) if bias else None
    want = p[0] + p[1] + p[2] + p[3]
    if b is not None:
        want = want + b.float()
    got = reduce_partials(p, b, torch.bfloat16)
    assert torch.equal(got.view(torch.int16), want.to(torch.bfloat16).view(torch.int16))


_PLAN_SCRIPT = r"""
import torch
from pytest_invariance.reference_kernels import launch

misses = []
launched = set()
original = launch.Launcher.launch


def spy(self, key, grid, args, constexprs, options=None):
    name = getattr(self.kernel, "__name__", None) or getattr(getattr(self.kernel, "fn", None), "__name__", "?")
    launched.add(name)
    if self.tail(len(args), constexprs) is None:
        misses.append(name)
    return original(self, key, grid, args, constexprs, options)


launch.Launcher.launch = spy
from pytest_invariance.engine._rope_triton import rotate_query_key
from pytest_invariance.reference_kernels import matmul_triton as mt
from pytest_invariance.reference_kernels import rowops
from pytest_invariance.reference_kernels.attention import triton_attn as ta
from pytest_invariance.reference_kernels.mutants.splitk_reduce_triton import reduce_partials

g = torch.Generator().manual_seed(0)
q = torch.randn(2, 4, 16, generator=g)
kc = torch.randn(5, 16, 2, 16, generator=g)
ta.decode_paged_triton(q, kc, kc.clone(), torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
                       torch.tensor([20, 7], dtype=torch.int32), split_size=16)
ta.decode_paged_triton(q, kc, kc.clone(), torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
                       torch.tensor([20, 7], dtype=torch.int32), split_size=16, tiles=ta.Tiles(fused_merge=True))
mt.bmm_triton(torch.randn(1, 5, 16).to(torch.bfloat16), torch.randn(1, 16, 8).to(torch.bfloat16))
x = torch.randn(3, 32, generator=g)
rowops.rms_norm(x, torch.ones(32), 1e-6, backend="interpret")
rowops.log_softmax(x, backend="interpret")
rowops.mean(x, backend="interpret")
reduce_partials(torch.randn(2, 3, 8, generator=g), None, torch.float32)
rotate_query_key(torch.randn(3, 64, generator=g), torch.arange(3), torch.ones(8, 8), torch.zeros(8, 8), 2, 1, 16)
print("LAUNCHED", sorted(launched))
print("MISSES", sorted(set(misses)))
"""


def test_every_call_site_gives_a_plan_its_constexprs():
    """A call that leaves out a constexpr without a default gets no plan and silently takes the slow
    JIT path on every call (a decode kernel once did, eager decode 2-4x slower on the H200): every
    kernel launched through a Launcher must cover its constexprs (run by the Triton interpreter)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", _PLAN_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("LAUNCHED", "MISSES")))
    assert lines["MISSES"] == "[]", proc.stdout
    for kernel in ("_attn_kernel", "_merge_kernel", "_rope_kernel", "_reduce_kernel"):
        assert kernel in lines["LAUNCHED"], proc.stdout
