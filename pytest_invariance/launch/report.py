"""``pytest-invariance census FILE``: the launch census as a matrix, one row per op.

Why a matrix: the columns are where the calls went (``unrouted``, ``declined``, ``reference``,
``exact``), so what an engine runs outside the invariant kernels stands in the first two columns,
and rows are sorted that way. ``--since`` / ``--until`` keep the ops called inside a time window
(the e2e suites' run: ops called only while the engine loaded weights drop out), ``--strict``
exits 1 when an op of the window is unrouted or declined.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from .classify import DECLINED, EXACT, REFERENCE, STATUSES, UNROUTED, maps_to

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("census", metavar="FILE", help="a census written by pytest-invariance launch --census")
    p.add_argument("--since", type=float, default=None, metavar="EPOCH",
                   help="only ops called at or after this time (seconds since the epoch)")  # fmt: skip
    p.add_argument("--until", type=float, default=None, metavar="EPOCH", help="only ops called at or before this time")
    p.add_argument("--hide-exact", action="store_true", help="leave out the rows whose calls are all exact")
    p.add_argument("--strict", action="store_true", help="exit 1 when an op is unrouted or declined")


def _shape_text(row: dict) -> str:
    if not row["shapes"]:
        return "-"
    top = row["shapes"][0]
    dims = " ".join("x".join(map(str, s)) or "()" for s in top["in"]) or "no tensors"
    dtypes = ",".join(sorted(set(top["dtypes"]))) or "-"
    more = len(row["shapes"]) - 1 + (1 if row.get("shapes_dropped") else 0)
    return f"{dims} {dtypes}" + (f" (+{more}{'+' if row.get('shapes_dropped') else ''} more)" if more else "")


def _in_window(row: dict, since: float | None, until: float | None) -> bool:
    first, last = row.get("first"), row.get("last")
    if since is not None and (last is None or last < since):
        return False
    return not (until is not None and (first is None or first > until))


def table(census: dict, since: float | None = None, until: float | None = None, hide_exact: bool = False) -> tuple[str, dict]:
    """(Markdown table, {status: [op names]}) of a census."""
    by_op: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in census.get("ops", []):
        if _in_window(r, since, until):
            by_op[r["op"]][r["status"]] = r
    found: dict[str, list[str]] = {s: [] for s in STATUSES}
    rows = []
    for op, per in by_op.items():
        for s in per:
            found[s].append(op)
        if hide_exact and set(per) == {EXACT}:
            continue
        worst = min(STATUSES.index(s) for s in per)
        calls = sum(r["calls"] for r in per.values())
        main = per.get(REFERENCE) or per.get(UNROUTED) or next(iter(per.values()))
        family, impl = maps_to(op, main["status"])
        if DECLINED in per and main["status"] == REFERENCE:
            impl += "; some calls declined"
        cells = [f"{per[s]['calls']:,}" if s in per else "·" for s in STATUSES]
        shapes = sum(len(r["shapes"]) for r in per.values())
        rows.append((worst, -calls, f"| {op} | {family} | {calls:,} | {shapes} | {_shape_text(main)} | "
                                    + " | ".join(cells) + f" | {impl} |"))  # fmt: skip
    head = ["| op | family | calls | shapes | most called with | " + " | ".join(STATUSES) + " | maps to |",
            "|---|---|---:|---:|---|" + "---:|" * len(STATUSES) + "---|"]  # fmt: skip
    return "\n".join(head + [r[2] for r in sorted(rows)]), {s: sorted(v) for s, v in found.items()}


def render(census: dict, since: float | None = None, until: float | None = None, hide_exact: bool = False) -> tuple[str, dict]:
    """The whole report: a heading line, the table, one line per status."""
    text, found = table(census, since, until, hide_exact)
    cmd = " ".join(census.get("command") or []) or "(parts only)"
    procs = census.get("processes") or []
    head = f"census of `{cmd[:120]}`: {len(procs)} process(es), exit status {census.get('exit_status')}"
    if since is not None or until is not None:
        head += f", ops called between {since or '-'} and {until or '-'}"
    lines = [head, "", text, ""]
    for s in STATUSES:
        names = found[s]
        shown = ", ".join(names) if s in (UNROUTED, DECLINED) else ""
        lines.append(f"{s}: {len(names)} op(s){': ' + shown if shown else ''}")
    return "\n".join(lines), found


def main(args: argparse.Namespace) -> int:
    from .census_file import CensusFileError, read

    try:
        census = read(args.census)
    except CensusFileError as exc:
        print(f"pytest-invariance: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    text, found = render(census, args.since, args.until, args.hide_exact)
    print(text)
    return EXIT_FOUND if args.strict and (found[UNROUTED] or found[DECLINED]) else EXIT_OK
