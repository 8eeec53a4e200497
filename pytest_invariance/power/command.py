"""``pytest-invariance power``: the zoo through a configuration; per class caught or not, the
summary line, and where the measurement is cached.

The configuration is given as the plugin's flags would give it (``--profile``, ``--trials``,
``--limit``, ``--seed``, ``--oracles``, and for ``--e2e`` the ``--levels`` and ``--dispatch``), so
``pytest-invariance power --profile quick`` says what ``pytest --invariance-profile quick`` can see.
Exit 0; 1 when a clean twin was flagged (a false alarm: the harness itself is wrong); 2 on a bad
value (one line).
"""

from __future__ import annotations

import argparse
import sys
import time

from pytest_invariance.oracles.vocabulary import PROFILES

from .config import OP_ORACLES, PowerConfig

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def _sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def _oracles(text: str) -> tuple[str, ...]:
    names = tuple(x for x in text.replace(" ", "").split(",") if x)
    bad = [n for n in names if n not in OP_ORACLES]
    if bad or not names:
        what = ", ".join(bad) if bad else repr(text)
        raise argparse.ArgumentTypeError(f"unknown oracle {what}; expected some of {', '.join(OP_ORACLES)}")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", choices=PROFILES, default="quick", help="sweep profile (default quick)")
    p.add_argument("--trials", type=_positive, default=3, help="trials per check (default 3)")
    p.add_argument("--limit", type=_positive, default=None, help="largest batch swept (default: the profile's)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument("--repeats", type=_positive, default=5, help="run-to-run repeats (default 5)")
    p.add_argument("--oracles", type=_oracles, default=OP_ORACLES, metavar="A,B",
                   help=f"per-op oracles the summary counts (default {','.join(OP_ORACLES)})")
    p.add_argument("--e2e", action="store_true", help="also the e2e zoo: the fake engines through the shipped e2e suites")
    p.add_argument("--levels", type=_sizes, default=None, metavar="N,N,...", help="e2e: --invariance-levels")
    p.add_argument("--dispatch", choices=("list", "independent"), default="list", help="e2e: --invariance-dispatch")
    p.add_argument("--replays", type=_positive, default=None, help="e2e: --invariance-replays")
    p.add_argument("--refresh", action="store_true", help="measure again even where cached")
    p.add_argument("--records", metavar="PATH", default=None,
                   help="append the per-op zoo's fixture records to this JSONL file (measures afresh)")


def main(args: argparse.Namespace) -> int:
    from .measure import get
    from .report import summary_line, table_lines

    cfg = PowerConfig(profile=args.profile, trials=args.trials, limit=args.limit, seed=args.seed,
                      repeats=args.repeats, oracles=args.oracles, levels=args.levels, dispatch=args.dispatch,
                      replays=args.replays)  # fmt: skip
    records: list[dict] | None = [] if args.records else None
    t0 = time.perf_counter()
    entries: list[dict] = []
    for part in ("ops", "e2e") if args.e2e else ("ops",):
        print(f"{part} zoo, {cfg.describe(cfg.oracles, part)}:", flush=True)
        m = get(cfg, part, records=records if part == "ops" else None, refresh=args.refresh or bool(records),
                progress=lambda e: print("  " + table_lines([e])[0], flush=True))  # fmt: skip
        assert m is not None
        if m.source == "cached":
            print("\n".join("  " + line for line in table_lines(m.entries)))
        print(f"  [{m.source} {m.digest}{f', {m.seconds:.0f} s to measure' if m.source == 'measured' else ''}; "
              f"{m.path or 'cache directory not writable: not cached'}]")  # fmt: skip
        entries += m.entries
    if records:
        from pytest_invariance.recordio import append_records

        try:
            append_records(args.records, records)
        except OSError as e:
            print(f"pytest-invariance: error: --records {args.records}: {e.strerror or e}", file=sys.stderr)
            return EXIT_USAGE
        print(f"{len(records)} records appended to {args.records}")
    print(f"power: {summary_line(entries, cfg.oracles)} ({time.perf_counter() - t0:.0f} s)")
    return EXIT_FOUND if any(e.get("false_alarm") for e in entries) else EXIT_OK
