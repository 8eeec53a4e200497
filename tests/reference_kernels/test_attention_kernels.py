"""Reference attention: accuracy against fp64 softmax attention, and the exact properties it promises.

CPU torch path at small shapes; the Triton kernels under TRITON_INTERPRET=1 (fp32/fp16:
the interpreter's bf16 dots are wrong); CUDA cases marked ``gpu``.
"""

from __future__ import annotations

import math
import os

import pytest

torch = pytest.importorskip("torch")

from pytest_invariance.oracles.bits import bit_view  # noqa: E402
from pytest_invariance.oracles.inputs import wide_spread  # noqa: E402
from pytest_invariance.reference_kernels import attention as A  # noqa: E402
from pytest_invariance.reference_kernels.mutants import splitkv_decode as M  # noqa: E402

SPLIT = 16


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(bit_view(a.cpu()), bit_view(b.cpu()))


def exact_attention(q, k, v, causal=True):
    """fp64 softmax attention of the last len(q) positions (GQA by repeating KV heads)."""
    g = q.shape[1] // k.shape[1]
    kk, vv = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    lq, lk = q.shape[0], k.shape[0]
    s = torch.einsum("qhd,khd->hqk", q.double(), kk) / math.sqrt(q.shape[2])
    if causal:
        qpos = torch.arange(lk - lq, lk)[:, None]
        s = s.masked_fill(torch.arange(lk)[None, :] > qpos, -math.inf)
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), vv)


def seqs(lens, heads=(4, 2, 16), dtype=torch.float32, seed=0, device="cpu"):
    hq, hkv, d = heads
    return [
        (
            wide_spread((n, hq, d), seed + 3 * i, dtype, decades=1.0, device=device),
            wide_spread((n, hkv, d), seed + 3 * i + 1, dtype, decades=1.0, device=device),
            wide_spread((n, hkv, d), seed + 3 * i + 2, dtype, decades=1.0, device=device),
        )
        for i, n in enumerate(lens)
    ]


def cu_of(lens, device="cpu"):
    c = [0]
    for n in lens:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=torch.int32, device=device)


def prefill(ss, backend="torch", split=SPLIT):
    lens = [s[0].shape[0] for s in ss]
    cu = cu_of(lens, ss[0][0].device)
    q, k, v = (torch.cat([s[i] for s in ss]) for i in range(3))
    return list(torch.split(A.prefill_varlen(q, k, v, cu, cu, split_size=split, backend=backend), lens))


def paged(ss, lens, page=4):
    """Caches holding sequence i's first lens[i] K/V, blocks scattered in reverse order."""
    hkv, d = ss[0][1].shape[1:]
    nblk = [-(-n // page) for n in lens]
    kc = torch.full((sum(nblk) + 2, page, hkv, d), float("nan"), dtype=ss[0][1].dtype)
    vc = kc.clone()
    bt = torch.zeros((len(lens), max(nblk)), dtype=torch.int32)
    nxt = sum(nblk)
    for i, n in enumerate(lens):
        nxt -= nblk[i]
        bt[i, : nblk[i]] = torch.arange(nxt, nxt + nblk[i])
        A.write_kv(kc, vc, ss[i][1][:n], ss[i][2][:n], A.slot_mapping_for(bt, i, 0, n, page))
    return kc, vc, bt, torch.tensor(lens, dtype=torch.int32)


LENS = [1, 15, 16, 17, 40]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_prefill_matches_fp64_attention(dtype):
    ss = seqs(LENS, dtype=dtype)
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    for (q, k, v), out in zip(ss, prefill(ss), strict=True):
        assert out.dtype == dtype
        ref = exact_attention(q, k, v)
        assert (out.double() - ref).abs().max().item() <= tol * max(1.0, ref.abs().max().item())


def test_noncausal_prefill_matches_fp64_attention():
    ((q, k, v),) = seqs([23])
    cu = cu_of([23])
    out = A.prefill_varlen(q, k, v, cu, cu, causal=False, split_size=SPLIT)
    assert torch.allclose(out.double(), exact_attention(q, k, v, causal=False), atol=1e-5)


def test_prefill_row_alone_equals_row_in_batch():
    ss = seqs(LENS)
    batched = prefill(ss)
    for s, out in zip(ss, batched, strict=True):
        assert same_bits(prefill([s])[0], out)


def test_decode_equals_prefill_at_every_position():
    ((q, k, v),) = seqs([40], heads=(8, 2, 16))
    whole = prefill([(q, k, v)])[0]
    for t in range(40):
        kc, vc, bt, sl = paged([(q, k, v)], [t + 1])
        d = A.decode_paged(q[t : t + 1], kc, vc, bt, sl, split_size=SPLIT)
        assert same_bits(d[0], whole[t]), f"position {t}"


def test_decode_invariant_to_batch_and_cache_placement():
    ss = seqs([17, 40, 3, 33, 16])
    lens = [s[0].shape[0] for s in ss]
    qs = torch.stack([s[0][-1] for s in ss])
    out = A.decode_paged(qs, *paged(ss, lens), split_size=SPLIT)
    alone = A.decode_paged(qs[:1], *paged(ss[:1], lens[:1], page=8), split_size=SPLIT)
    assert same_bits(out[0], alone[0])


@pytest.mark.parametrize("chunk", [SPLIT, SPLIT // 2 + 1, 7, 3 * SPLIT])
def test_chunked_prefill_equals_whole_for_any_chunk(chunk):
    ((q, k, v),) = seqs([57])
    whole = prefill([(q, k, v)])[0]
    parts = []
    for a in range(0, 57, chunk):
        b = min(57, a + chunk)
        parts.append(A.prefill_varlen(q[a:b], k[:b], v[:b], cu_of([b - a]), cu_of([b]), split_size=SPLIT))
    assert same_bits(torch.cat(parts), whole)


def test_prefill_paged_equals_prefill_varlen():
    ss = seqs([40, 9])
    whole = prefill(ss)
    kc, vc, bt, sl = paged(ss, [40, 9])
    # Chunk of the last 10 tokens of seq 0 and all of seq 1, against the cache.
    q = torch.cat([ss[0][0][30:], ss[1][0]])
    out = A.prefill_paged(q, kc, vc, bt, cu_of([10, 9]), sl, split_size=SPLIT)
    assert same_bits(out[:10], whole[0][30:]) and same_bits(out[10:], whole[1])


def test_split_size_changes_bits():
    """The split size is part of the arithmetic: a different one must show up (the test can fail)."""
    ss = seqs([40])
    assert not same_bits(prefill(ss, split=16)[0][-1], prefill(ss, split=32)[0][-1])


def test_gqa_group_must_divide():
    ((q, k, v),) = seqs([4], heads=(3, 2, 16))
    with pytest.raises(ValueError, match="multiple"):
        A.prefill_varlen(q, k, v, cu_of([4]), cu_of([4]))


def test_mutant_split_count_follows_batch_and_diverges():
    assert M.num_splits(1, 8, 4096) > M.num_splits(64, 8, 4096) == 1
    ss = seqs([40] * 9)
    lens = [40] * 9
    qs = torch.stack([s[0][-1] for s in ss])
    kw = {"min_keys": 4, "sm_count": 8}
    alone = M.splitkv_decode(qs[:1], *paged(ss[:1], lens[:1]), **kw)
    batched = M.splitkv_decode(qs, *paged(ss, lens), **kw)
    assert torch.allclose(alone[0], batched[0], atol=1e-5)
    assert not same_bits(alone[0], batched[0])


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="Triton interpreter only (TRITON_INTERPRET=1)"
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_interpreter_properties(dtype):
    ss = seqs([1, 17, 40], heads=(4, 2, 16), dtype=dtype)
    out = prefill(ss, backend="triton")
    tol = 1e-5 if dtype == torch.float32 else 3e-3
    for (q, k, v), o in zip(ss, out, strict=True):
        assert (o.double() - exact_attention(q, k, v)).abs().max().item() < tol
    assert same_bits(prefill(ss[1:2], backend="triton")[0], out[1])
    q, k, v = ss[2]
    for t in (0, 15, 16, 39):
        kc, vc, bt, sl = paged([ss[2]], [t + 1])
        d = A.decode_paged(q[t : t + 1], kc, vc, bt, sl, split_size=SPLIT, backend="triton")
        assert same_bits(d[0], out[2][t]), f"position {t}"
    parts = [
        A.prefill_varlen(q[a : a + 7], k[: a + 7], v[: a + 7], cu_of([min(7, 40 - a)]), cu_of([min(40, a + 7)]),
                         split_size=SPLIT, backend="triton")
        for a in range(0, 40, 7)
    ]  # fmt: skip
    assert same_bits(torch.cat(parts), out[2])


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="Triton interpreter only (TRITON_INTERPRET=1)"
)
def test_triton_mutants_move_split_boundaries_with_batch_and_chunks():
    """The CUDA form of the split-KV mutants (reference kernel, heuristic split size) must diverge."""
    kw = {"min_keys": 4, "sm_count": 8, "backend": "triton"}
    ss = seqs([100] * 5)
    qs = torch.stack([s[0][-1] for s in ss])
    alone = M.splitkv_decode(qs[:1], *paged(ss[:1], [100]), **kw)
    batched = M.splitkv_decode(qs, *paged(ss, [100] * 5), **kw)
    assert torch.allclose(alone[0], batched[0], atol=1e-5)
    assert not same_bits(alone[0], batched[0])
    q, k, v = ss[0]
    whole = M.splitkv_prefill(q, k, v, cu_of([100]), cu_of([100]), **kw)  # 4 splits of 25 keys
    assert (whole.double() - exact_attention(q, k, v)).abs().max().item() < 1e-5  # untiled splits are exact too
    parts = [M.splitkv_prefill(q[a : a + 50], k[: a + 50], v[: a + 50], cu_of([50]), cu_of([a + 50]), **kw)
             for a in (0, 50)]  # fmt: skip
    assert not same_bits(torch.cat(parts), whole)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_triton_properties():
    ss = seqs([1, 1023, 1024, 1025, 3000], heads=(32, 8, 128), dtype=torch.bfloat16, device="cuda")
    out = prefill(ss, backend="triton", split=A.SPLIT_SIZE)
    for (q, k, v), o in zip(ss, out, strict=True):
        ref = exact_attention(q.cpu(), k.cpu(), v.cpu())
        assert (o.cpu().double() - ref).abs().max().item() < 3e-2
    assert same_bits(prefill(ss[3:4], backend="triton", split=A.SPLIT_SIZE)[0], out[3])
    q, k, v = ss[4]
    whole = out[4]
    for t in (0, 1023, 1024, 2047, 2999):  # split edges at A.SPLIT_SIZE = 1024
        kc, vc, bt, sl = (x.cuda() for x in paged([(q.cpu(), k.cpu(), v.cpu())], [t + 1], page=16))
        d = A.decode_paged(q[t : t + 1], kc, vc, bt, sl)
        assert same_bits(d[0], whole[t]), f"position {t}"


def test_heuristic_split_size_cuts_the_longest_sequence_into_near_equal_parts():
    assert M.heuristic_split_size(1, 1000) == 1000  # one split: the whole sequence
    assert M.heuristic_split_size(4, 1000) == 250
    assert M.heuristic_split_size(16, 1000) == 63  # not block-aligned: boundaries move with the length
    assert M.heuristic_split_size(64, 100) == 16  # floor
    for n in (1, 2, 3, 5, 17, 64):
        assert -(-8448 // M.heuristic_split_size(n, 8448)) <= n


_FLAT_LOOP_SCRIPT = r"""
import torch
from pytest_invariance.reference_kernels.attention import triton_attn as ta


def cu(lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def same(a, b):
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


g = torch.Generator().manual_seed(7)
for hq, hkv, d in ((4, 1, 16), (2, 2, 12)):
    lens = [300, 129, 40]
    seqs = [tuple(torch.randn(n, h, d, generator=g) for h in (hq, hkv, hkv)) for n in lens]
    q, k, v = (torch.cat([s[i] for s in seqs]) for i in range(3))
    for split in (128, 48):  # two 64-key blocks per split; a split the 32-key block does not tile
        out = ta.prefill_varlen_triton(q, k, v, cu(lens), cu(lens), split_size=split)
        q0, k0, v0 = seqs[0]
        alone = ta.prefill_varlen_triton(q0, k0, v0, cu([300]), cu([300]), split_size=split)
        assert same(alone, out[:300]), ("alone vs batch", hq, d, split)
        parts = [ta.prefill_varlen_triton(q0[a : a + 100], k0[: a + 100], v0[: a + 100], cu([100]), cu([a + 100]),
                                          split_size=split) for a in (0, 100, 200)]
        assert same(torch.cat(parts), alone), ("chunked vs whole", hq, d, split)
        page = 16
        kc = torch.zeros(20, page, hkv, d)
        vc = torch.zeros_like(kc)
        bt = torch.arange(19, dtype=torch.int32).flip(0)[None, :]
        slot = (bt[0].long()[torch.arange(300) // page] * page + torch.arange(300) % page)
        kc.view(-1, hkv, d)[slot], vc.view(-1, hkv, d)[slot] = k0, v0
        for t in (0, split - 1, split, 2 * split + 5, 299):
            dec = ta.decode_paged_triton(q0[t : t + 1], kc, vc, bt, torch.tensor([t + 1], dtype=torch.int32),
                                         split_size=split)
            assert same(dec[0], alone[t]), ("decode vs prefill", hq, d, split, t)
# more queries than keys: the queries before the first key see nothing, the rest their own keys
qa, ka, va = (torch.randn(n, h, 16, generator=g) for n, h in ((200, 4), (32, 1), (32, 1)))
out = ta.prefill_varlen_triton(qa, ka, va, cu([200]), cu([32]), split_size=16)
assert torch.count_nonzero(out[:168]) == 0
assert same(out[168:], ta.prefill_varlen_triton(qa[168:], ka, va, cu([32]), cu([32]), split_size=16))
print("OK")
"""


def test_triton_prefill_loop_across_splits_and_untiled_splits_under_interpreter():
    """The prefill's one loop over (split, block): several blocks per split, splits the block does not
    tile, D below its block, GQA and MHA: a row alone == in a batch, chunked == whole, decode ==
    prefill at split edges, and queries before the first key see none (own process: the interpreter
    must be chosen before triton is imported)."""
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", _FLAT_LOOP_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]
