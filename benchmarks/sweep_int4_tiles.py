"""Which tile and piece length should the int4-gemm reference use on this GPU?

For each candidate tile (BLOCK_M, BLOCK_N, BLOCK_K = group, warps, stages) and piece length
(``GROUPS_PER_SPLIT``): the reference's median time at M = 1, 16, 256, 4096 with its own plan
(eager do_bench and under a CUDA graph), the same at M = 256 and 4096 with the weight not
dequantized first, the two stocks' times in the same run, and a bitwise check that rows computed
in a batch of 520 (dequantized first) equal the same rows at M = 1, 3, 16, 17, 64, 130 (split or
walked whole): a configuration that is not batch-invariant is disqualified, whatever its speed.

    python benchmarks/sweep_int4_tiles.py [--k 4096 --n 6144]
"""

from __future__ import annotations

import argparse

from _common import bench_graph_ms, bench_ms, ring

TILES = [(64, 64, 128, 4, 3), (64, 64, 128, 4, 4), (64, 128, 128, 4, 3), (128, 64, 128, 4, 3),
         (128, 128, 128, 8, 2), (64, 32, 128, 4, 4)]  # fmt: skip
PIECE_GROUPS = (2, 4, 8)
SIZES = (1, 16, 256, 4096)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=6144)
    args = ap.parse_args()
    import torch
    from pytest_invariance.oracles.inputs import rows_pool, wide_spread
    from pytest_invariance.reference_kernels import int4
    from pytest_invariance.reference_kernels import int4_triton as it

    k, n, bf = args.k, args.n, torch.bfloat16
    qw = int4.quantize_int4(wide_spread((n, k), 4, device="cuda"))
    pool = rows_pool(520, (k,), 0, bf, "cuda")
    xs = {m: ring(lambda i, m=m: (rows_pool(m, (k,), i, bf, "cuda"),), m * k * 2, cap=64) for m in SIZES}

    def times(fn, m):
        return bench_ms(fn, xs[m]), bench_graph_ms(fn, xs[m])

    stocks = {"torch-dequant": int4.stock_dequant_linear, "torch-int4pack": int4.stock_int4pack}
    stock = {(s, m): times(lambda x, f=f: f(x, *qw), m) for s, f in stocks.items() for m in SIZES}
    best = {m: tuple(min(stock[s, m][i] for s in stocks) for i in (0, 1)) for m in SIZES}
    print("fastest stock ms (eager/graph): " + "  ".join(f"M{m} {best[m][0]:.4f}/{best[m][1]:.4f}" for m in SIZES))
    for (s, m), (e, g) in sorted(stock.items()):
        print(f"  {s:<16} M{m:<5} eager {e:.4f}  graph {g:.4f}")
    print("ratio = fastest stock / reference (>= 1: the reference is faster); eager/graph")
    head = "".join(f"{'M' + str(m):>13}" for m in SIZES) + f"{'M256 fused':>13}{'M4096 fused':>13}"
    print(f"{'tile':<22}{'pieces':>7}{'bits':>6}{head}{'min g':>7}")
    for tile in TILES:
        for gps in PIECE_GROUPS:
            it.GROUPS_PER_SPLIT = gps
            try:
                whole = it.int4_mm_triton(pool, *qw, tile=tile)
                same = all(torch.equal(it.int4_mm_triton(pool[:m], *qw, tile=tile, force=f).view(torch.int16),
                                       whole[:m].view(torch.int16))
                           for m in (1, 3, 16, 17, 64, 130) for f in ((True, False), (False, False)))  # fmt: skip
                cells, gmin = [], 9.0
                for m in SIZES:
                    e, g = times(lambda x, t=tile: it.int4_mm_triton(x, *qw, tile=t), m)
                    cells.append(f"{best[m][0] / e:.2f}/{best[m][1] / g:.2f}")
                    gmin = min(gmin, best[m][1] / g)
                for m in (256, 4096):
                    e, g = times(lambda x, t=tile, m=m: it.int4_mm_triton(x, *qw, tile=t, force=(False, False)), m)
                    cells.append(f"{best[m][0] / e:.2f}/{best[m][1] / g:.2f}")
                print(f"{str(tile):<22}{gps:>7}{str(same):>6}" + "".join(f"{c:>13}" for c in cells) + f"{gmin:>7.2f}")
            except Exception as exc:  # a tile that does not compile (shared memory) is named, not fatal
                print(f"{str(tile):<22}{gps:>7} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
