"""Which value-block width and warp count should the linear-attention scan use on this GPU?

For each (BLOCK_DV, warps): the reference scan's time at B = 1 and 8 sequences (T = 512, 16 heads,
DK = DV = 128; eager do_bench and under a CUDA graph) against the torch chunked stock in the same
run, and the bits it must keep: prefill == the same prefill in two pieces == prefill then one
decode step, and row 0 of a batch of 8 == the same sequence alone. A configuration that breaks any
of them is disqualified, whatever its speed.

    python benchmarks/sweep_scan_tiles.py
"""

from __future__ import annotations

from _common import bench_graph_ms, bench_ms, ring

CONFIGS = [(32, 4), (32, 2), (16, 4), (16, 2), (16, 1), (8, 2), (8, 1)]
T, H, D = 512, 16, 128


def main() -> int:
    import torch
    from pytest_invariance.reference_kernels import linear_attention as la
    from pytest_invariance.reference_kernels.linear_attention_triton import scan_triton

    def args(b, seed):
        gen = torch.Generator(device="cuda").manual_seed(seed)

        def mk(*shape):
            return torch.randn(*shape, generator=gen, device="cuda")

        return (mk(b, T, H, D).bfloat16(), (mk(b, T, H, D) * D**-0.5).bfloat16(), mk(b, T, H, D).bfloat16(),
                -torch.rand(b, T, H, generator=gen, device="cuda") * 0.1)  # fmt: skip

    def same(a, b):
        return torch.equal(a.contiguous().view(torch.int16 if a.dtype == torch.bfloat16 else torch.int32),
                           b.contiguous().view(torch.int16 if b.dtype == torch.bfloat16 else torch.int32))  # fmt: skip

    xs = {b: ring(lambda i, b=b: args(b, i), b * T * H * D * 6, cap=16) for b in (1, 8)}
    stock = {b: (bench_ms(la.stock_chunked, xs[b]), bench_graph_ms(la.stock_chunked, xs[b])) for b in (1, 8)}
    print("torch-chunked ms (eager/graph): " + "  ".join(f"B{b} {e:.4f}/{g:.4f}" for b, (e, g) in stock.items()))
    print(f"{'BLOCK_DV':>9}{'warps':>6}  {'bits':<28}" + "".join(f"{'B' + str(b) + ' e/g ratio':>16}" for b in (1, 8)))
    q, k, v, g = args(8, 99)
    for bdv, w in CONFIGS:
        run = lambda *a, state=None, bdv=bdv, w=w: scan_triton(*a, state, block_dv=bdv, warps=w)  # noqa: E731
        o, s = run(q, k, v, g)
        o1, s1 = run(q[:, :200], k[:, :200], v[:, :200], g[:, :200])
        o2, s2 = run(q[:, 200:], k[:, 200:], v[:, 200:], g[:, 200:], state=s1)
        od, sd = run(q[:, -1:], k[:, -1:], v[:, -1:], g[:, -1:], state=run(q[:, :-1], k[:, :-1], v[:, :-1], g[:, :-1])[1])
        ob, sb = run(q[:1], k[:1], v[:1], g[:1])
        checks = {"pieces": same(torch.cat([o1, o2], 1), o) and same(s2, s), "decode": same(od, o[:, -1:]) and same(sd, s),
                  "batch": same(ob, o[:1]) and same(sb, s[:1])}  # fmt: skip
        cells = []
        for b in (1, 8):
            e, gr = bench_ms(run, xs[b]), bench_graph_ms(run, xs[b])
            cells.append(f"{stock[b][0] / e:.2f}/{stock[b][1] / gr:.2f}")
        bits = ",".join(n for n, ok in checks.items() if ok) if all(checks.values()) else "BROKEN " + ",".join(n for n, ok in checks.items() if not ok)
        print(f"{bdv:>9}{w:>6}  {bits:<28}" + "".join(f"{c:>16}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
