"""The per-op zoo: planted bugs with a known ground truth, each beside a clean twin.

Every class is a real failure mode of batched kernels, written small: a dot product over
``arith.K`` terms whose reduction order (or zero sign, NaN payload, rare race) is chosen the way
the bug chooses it. The planted subject must be seen by the oracles the class names; its clean
twin does the same work in a batch-independent way and must never be flagged. Both are plain
``fn(rows) -> out`` callables, run through the public ``invariance`` fixture like a user's kernel.
Written for the zoo alone: the suites' own mutants (``reference_kernels/mutants``) are controls,
not ground truth, and share no code with it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_invariance.oracles.vocabulary import BATCH_POSITION, BATCH_SIZE, RUN_TO_RUN

from . import arith

Fn = Callable[..., object]  # rows -> out (torch tensors; torch loads when a subject is built)
BATCH_ORACLES = (BATCH_SIZE, BATCH_POSITION)
ALL_OP_ORACLES = (BATCH_SIZE, BATCH_POSITION, RUN_TO_RUN)
CANON = arith.even_cuts(4)  # the clean twins' fixed split: 4 partials whatever the batch
NEIGHBOUR_TRIGGER = 27.0  # |x| above this in any row of the batch switches its path (~5% of rows)
RARE_RATE = 0.1  # the rare race fires on one call in ten


@dataclass(frozen=True)
class OpClass:
    """One planted failure mode. ``build(planted, run)`` returns the subject (``planted``) or its
    clean twin; ``run`` keys the subject's own randomness (the rare race), so repeated runs are
    independent and reproducible. ``fires_at(n)`` says at which batch sizes the bug can show
    (None: any), which names the reason of a miss: the size was not swept. ``blind`` names the
    contracts or oracles under which the class cannot be seen by design, with why."""

    name: str
    what: str
    oracles: tuple[str, ...]
    build: Callable[[bool, int], Fn]
    probabilistic: bool = False  # measured over repeated runs: detection is a rate, not a yes/no
    fires_at: Callable[[int], bool] | None = None
    needs: str = ""  # the sizes it needs, in words, for the miss reason
    blind: dict[str, str] = field(default_factory=dict)


def _splits_by_batch(n: int) -> int:
    """Split-K count chosen by M, as cuBLAS-style heuristics do: more partials for small M."""
    return 1 if n <= 3 else 2 if n <= 15 else 4 if n <= 63 else 8


def _uniform(cuts_of: Callable[[int], tuple[int, ...]]) -> Callable[[bool, int], Fn]:
    """A subject whose every row takes ``cuts_of(N)`` (planted) or the fixed split (twin)."""

    def build(planted: bool, run: int) -> Fn:
        w = arith.weights()

        def fn(rows):
            return arith.dot_all(rows, w, cuts_of(rows.shape[0]) if planted else CANON)

        return fn

    return build


def _bucket(n: int) -> int:
    """The capture bucket a batch is padded to: 1, 2, 4, 8, then multiples of 8 (vLLM's ladder)."""
    for b in (1, 2, 4, 8):
        if n <= b:
            return b
    return -(-n // 8) * 8


def _padded(planted: bool, run: int) -> Fn:
    """Pads the batch with zero rows to its bucket; the planted kernel picks its split from the
    padded size (alternating 2 and 1 partials bucket to bucket), the twin ignores the padding."""
    import torch

    w = arith.weights()
    ladder_index = {b: i for i, b in enumerate(sorted({_bucket(n) for n in range(1, 9000)}))}

    def fn(rows):
        n = rows.shape[0]
        b = _bucket(n)
        padded = torch.cat([rows, rows.new_zeros((b - n, rows.shape[1]))])
        cuts = arith.even_cuts(1 + ladder_index[b] % 2) if planted else CANON
        return arith.dot_all(padded, w, cuts)[:n]

    return fn


TILE_ROWS, UNITS_PER_TILE, WORKERS = 16, 8, 6  # stream-K: 16-row tiles, K in 8 units, 6 workers


def stream_k_cuts(n: int) -> list[tuple[int, ...]]:
    """Per row, where stream-K's worker boundaries cut its tile's K loop: the work (tiles x K
    units) is dealt out evenly to a fixed number of workers, so which tiles are split, and where,
    follows the number of tiles, and with it the batch."""
    tiles = -(-n // TILE_ROWS)
    total = tiles * UNITS_PER_TILE
    per_worker = -(-total // WORKERS)
    step = arith.K // UNITS_PER_TILE
    out = []
    for t in range(tiles):
        lo, hi = t * UNITS_PER_TILE, (t + 1) * UNITS_PER_TILE
        cuts = tuple((b - lo) * step for b in range(per_worker, total, per_worker) if lo < b < hi)
        out += [cuts] * min(TILE_ROWS, n - t * TILE_ROWS)
    return out


def _stream_k(planted: bool, run: int) -> Fn:
    """Planted: stream-K's split of each tile; twin: every tile split at the same fixed cuts
    (data-parallel split-K, the batch-invariant schedule)."""
    w = arith.weights()

    def fn(rows):
        if not planted:
            return arith.dot_all(rows, w, CANON)
        return arith.dot_rows(rows, w, stream_k_cuts(rows.shape[0]))

    return fn


def _spare_row0(planted: bool, run: int) -> Fn:
    """Planted: row 0 (the probe most checks watch) keeps the fixed split; every other row takes
    the split chosen by the batch size. Twin: every row the fixed split."""
    w = arith.weights()

    def fn(rows):
        n = rows.shape[0]
        if not planted:
            return arith.dot_all(rows, w, CANON)
        return arith.dot_rows(rows, w, [CANON] + [arith.even_cuts(_splits_by_batch(n))] * (n - 1))

    return fn


def _neighbour(planted: bool, run: int) -> Fn:
    """Overflow guard: a row with |x| above the trigger is scaled by 1/3 before the dot (and back
    after). Planted: one such row in the batch switches every row to the guarded path (a
    per-batch decision, as a per-tensor dynamic scale makes); twin: each row decides for itself."""
    w = arith.weights()

    def fn(rows):
        hot = rows.abs().amax(dim=1) > NEIGHBOUR_TRIGGER
        guard = hot.any().expand_as(hot) if planted else hot
        out = arith.dot_all(rows, w, CANON) if not bool(guard.all()) else None
        if not bool(guard.any()):
            return out
        scaled = arith.dot_all(rows[guard] * (1 / 3), w, CANON) * 3  # rows are independent: only the guarded
        if out is None:
            return scaled
        out[guard] = scaled
        return out

    return fn


def _signed_zero(planted: bool, run: int) -> Fn:
    """ReLU of the dot. The twin clamps (+0 for a negative); the planted kernel's batched path
    (N >= 8) multiplies by the mask, which gives -0 for a negative: equal as numbers, not as bits."""
    w = arith.weights()

    def fn(rows):
        d = arith.dot_all(rows, w, CANON)
        if planted and rows.shape[0] >= 8:
            return d * (d > 0)
        return d.clamp(min=0)

    return fn


QNAN, QNAN_NEG = 0x7FC00000, 0xFFC00001  # the canonical quiet NaN; a negative one with a payload


def _nan_payload(planted: bool, run: int) -> Fn:
    """Negative dots are undefined (NaN). The twin writes the canonical quiet NaN; the planted
    kernel's batched path (N >= 16) writes another NaN (sign and payload set): NaN either way,
    but other bits, as two code paths' NaNs often are."""
    import torch

    w = arith.weights()

    def fn(rows):
        d = arith.dot_all(rows, w, CANON)
        bits = QNAN_NEG if planted and rows.shape[0] >= 16 else QNAN
        return torch.where(d < 0, arith.with_bits(d.shape, bits), d)

    return fn


def _rare(planted: bool, run: int) -> Fn:
    """A rare race: on one call in ten (a seeded stream per run, so a run is reproducible) one
    output element lands one ULP up. The twin draws the same stream and never moves."""
    rng = random.Random(1_000_003 * (run + 1))
    w = arith.weights()

    def fn(rows):
        d = arith.dot_all(rows, w, CANON)
        if rng.random() < RARE_RATE and planted:
            d = d.clone()
            d[-1, 0] = arith.next_up(d[-1, 0])
        return d

    return fn


_ZERO_SIGN = ("ulp<=k and tolerance contracts: +0 and -0 are 0 ULP apart and equal as numbers; only the "
              "bitwise contract (the default) sees it")  # fmt: skip
_NAN = ("ulp<=k and tolerance contracts: two NaNs are 0 ULP apart (equal_nan); only the bitwise "
        "contract (the default) sees a payload")  # fmt: skip
_DETERMINISTIC = "a deterministic batch dependence repeats itself exactly: run-to-run cannot see it"

OP_CLASSES: tuple[OpClass, ...] = (
    OpClass("split-by-batch", "split-K count chosen by the batch size (1/2/4/8 partials)", BATCH_ORACLES,
            _uniform(lambda n: arith.even_cuts(_splits_by_batch(n)))),
    OpClass("stream-k", "stream-K: worker boundaries cut row tiles' K loops by the number of tiles",
            BATCH_ORACLES, _stream_k),
    OpClass("bucket-padding", "padded to its capture bucket; the split follows the padded size", BATCH_ORACLES,
            _padded),
    OpClass("only-at-6", "another split at exactly batch 6", BATCH_ORACLES,
            _uniform(lambda n: arith.even_cuts(2) if n == 6 else CANON), fires_at=lambda n: n == 6,
            needs="N=6"),
    OpClass("large-batch", "another split above 64 rows (a large-M tile)", BATCH_ORACLES,
            _uniform(lambda n: arith.even_cuts(2) if n > 64 else CANON), fires_at=lambda n: n > 64,
            needs="N > 64"),
    OpClass("row-0-spared", "every row but row 0 split by the batch size", BATCH_ORACLES, _spare_row0),
    OpClass("neighbour-trigger", f"one neighbour with |x| > {NEIGHBOUR_TRIGGER:g} switches the whole batch's path",
            BATCH_ORACLES, _neighbour, probabilistic=True),
    OpClass("signed-zero", "batched path writes -0 where the single-row path writes +0", BATCH_ORACLES,
            _signed_zero, fires_at=lambda n: n >= 8, needs="N >= 8", blind={"contract": _ZERO_SIGN}),
    OpClass("nan-payload", "batched path writes a NaN with other sign and payload bits", BATCH_ORACLES,
            _nan_payload, fires_at=lambda n: n >= 16, needs="N >= 16", blind={"contract": _NAN}),
    OpClass("rare-1-in-10", "a race that moves one element 1 ULP on one call in ten", ALL_OP_ORACLES, _rare,
            probabilistic=True),
)  # fmt: skip

for _c in OP_CLASSES:  # every batch class is out of run-to-run's reach, by design
    if RUN_TO_RUN not in _c.oracles:
        _c.blind.setdefault(RUN_TO_RUN, _DETERMINISTIC)


def rows_for(n_rows: int) -> Callable[[int], object]:
    """The pool a zoo check draws: ``n_rows`` order-sensitive rows of length ``arith.K`` per seed."""
    from pytest_invariance.oracles.inputs import rows_pool

    return lambda seed: rows_pool(n_rows, (arith.K,), seed)
