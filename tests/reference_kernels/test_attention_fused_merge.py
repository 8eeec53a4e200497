"""The fused decode merge (``Tiles(fused_merge=True)``): the last split program of a (sequence, KV
head) merges the partials instead of a second kernel. Same folds, same order, so its bits must equal
the two-kernel decode's and so the prefill's; its arrival counters must be left at zero (the next
call and a replayed CUDA graph rely on it). Run by the Triton interpreter, in its own process (the
interpreter must be chosen before triton is imported); the H200 measures it in
``bench_attention.py --sweep``."""

from __future__ import annotations

import pytest

_SCRIPT = r"""
import torch
from pytest_invariance.reference_kernels.attention import triton_attn as ta

FUSED = ta.Tiles(fused_merge=True)
# Uninitialised memory made poison: a merge that reads a partial no program wrote, or an output
# element no program stored, shows as NaN instead of whatever an earlier call left there.
_empty, _empty_like = torch.empty, torch.empty_like


def poison(t):
    return t.fill_(float("nan") if t.is_floating_point() else -7)


torch.empty = lambda *a, **kw: poison(_empty(*a, **kw))
torch.empty_like = lambda *a, **kw: poison(_empty_like(*a, **kw))


def cu(lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def same(a, b):
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def paged(ks, vs, lens, page=16):
    hkv, d = ks[0].shape[1:]
    nblk = [-(-n // page) for n in lens]
    kc = torch.zeros(sum(nblk) + 1, page, hkv, d)
    vc = torch.zeros_like(kc)
    bt = torch.zeros(len(lens), max(nblk), dtype=torch.int32)
    nxt = sum(nblk)
    for i, n in enumerate(lens):  # blocks in reverse batch order
        nxt -= nblk[i]
        bt[i, : nblk[i]] = torch.arange(nxt, nxt + nblk[i])
        slot = bt[i].long()[torch.arange(n) // page] * page + torch.arange(n) % page
        kc.view(-1, hkv, d)[slot], vc.view(-1, hkv, d)[slot] = ks[i][:n], vs[i][:n]
    return kc, vc, bt, torch.tensor(lens, dtype=torch.int32)


g = torch.Generator().manual_seed(11)
checked = 0
for hq, hkv, d in ((4, 1, 16), (2, 2, 12)):  # GQA; MHA with D below its block
    lens = [40, 1, 32, 17]  # three splits of 16, one key, a split edge, one past it
    seqs = [tuple(torch.randn(n, h, d, generator=g) for h in (hq, hkv, hkv)) for n in lens]
    q, k, v = (torch.cat([s[i] for s in seqs]) for i in range(3))
    whole = torch.split(ta.prefill_varlen_triton(q, k, v, cu(lens), cu(lens), split_size=16), lens)
    kc, vc, bt, sl = paged([s[1] for s in seqs], [s[2] for s in seqs], lens)
    qd = torch.stack([s[0][-1] for s in seqs])
    two = ta.decode_paged_triton(qd, kc, vc, bt, sl, split_size=16)
    for call in range(2):  # the second call reuses the counters the first left at zero
        fused = ta.decode_paged_triton(qd, kc, vc, bt, sl, split_size=16, tiles=FUSED)
        assert same(fused, two), ("fused vs two-kernel decode", hq, hkv, d, call)
        for i, n in enumerate(lens):
            assert same(fused[i], whole[i][n - 1]), ("fused decode vs prefill", hq, hkv, d, i, n)
        assert int(ta._counters[torch.device("cpu")].abs().sum()) == 0, "counters not reset"
        checked += 1
# a batch larger than the cached counters: a fresh, larger buffer, bits unchanged
small = ta._counters[torch.device("cpu")]
ta.COUNTER_CHUNK = 4
ta._counters.clear()
kc, vc, bt, sl = paged([seqs[0][1]] * 3, [seqs[0][2]] * 3, [40, 33, 17])
qd = torch.stack([seqs[0][0][-1]] * 3)
assert same(ta.decode_paged_triton(qd, kc, vc, bt, sl, split_size=16, tiles=FUSED),
            ta.decode_paged_triton(qd, kc, vc, bt, sl, split_size=16))
assert ta._counters[torch.device("cpu")].numel() == 3 * 2 and int(ta._counters[torch.device("cpu")].sum()) == 0
print("OK", checked)
"""


def test_fused_merge_decode_bits_equal_two_kernel_decode_and_prefill_and_counters_reset():
    pytest.importorskip("triton")
    from interpreter_run import run_interpreted

    run_interpreted(_SCRIPT, "OK 4")


@pytest.mark.gpu
def test_fused_merge_on_cuda_eager_and_in_a_replayed_graph():
    """On the GPU the merge's ordering is real (programs finish in any order, on any SM): many
    (sequence, KV head) pairs, 1-32 splits each, bits == the two-kernel decode, eagerly and from a
    CUDA graph replayed on changed inputs, counters back at zero after every call."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from pytest_invariance.reference_kernels.attention import triton_attn as ta

    g = torch.Generator(device="cuda").manual_seed(5)
    b, hq, hkv, d, page, nblk = 48, 32, 8, 128, 16, 2048
    kc = torch.randn(b * nblk + 1, page, hkv, d, device="cuda", generator=g).to(torch.bfloat16)
    vc = torch.randn_like(kc, dtype=torch.float32).to(torch.bfloat16)
    bt = torch.randperm(b * nblk, device="cuda", generator=g).view(b, nblk).to(torch.int32)
    sl = torch.randint(1, nblk * page + 1, (b,), device="cuda", generator=g, dtype=torch.int32)
    sl[:4] = torch.tensor([1, 1024, 1025, nblk * page], dtype=torch.int32)
    q = torch.randn(b, hq, d, device="cuda", generator=g).to(torch.bfloat16)
    fused = ta.Tiles(block_m=ta.DECODE_TILES.block_m, num_stages=ta.DECODE_TILES.num_stages, fused_merge=True)

    def both():
        return ta.decode_paged_triton(q, kc, vc, bt, sl), ta.decode_paged_triton(q, kc, vc, bt, sl, tiles=fused)

    for _ in range(3):
        two, one = both()
        assert torch.equal(two.view(torch.int16), one.view(torch.int16))
        assert int(ta._counters[q.device].abs().sum()) == 0
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        both()  # warm-up on the capture stream (counters already cached)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = both()
    for trial in range(5):
        q.copy_(torch.randn(b, hq, d, device="cuda", generator=g).to(torch.bfloat16))
        sl.copy_(torch.randint(1, nblk * page + 1, (b,), device="cuda", generator=g, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(got[0].view(torch.int16), got[1].view(torch.int16)), f"replay {trial}"
        assert int(ta._counters[q.device].abs().sum()) == 0
