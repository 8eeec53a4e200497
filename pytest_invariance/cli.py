"""``pytest-invariance``: render the matrix, compare with a committed one, serve the bundled engine,
launch any engine under the reference kernels and print its op census, measure power, fuzz a URL.

Kept light: importing this module imports neither torch nor pandas; each
subcommand imports what it needs when it runs. Every user error is one line
on stderr naming the offending value, with exit status 2 (argparse's
convention); a comparison that finds regressions exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from . import __version__

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error instead of usage + error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class UsageError(Exception):
    """A bad value given on the command line or a file that cannot be used."""


class _NoRecords(Exception):
    """Every line of every records file was skipped: nothing to render or compare."""


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="pytest-invariance",
        description="Records and compatibility matrix of pytest-invariance (batch-invariance verdicts).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    m = sub.add_parser("matrix", help="render matrix.md/.html/.csv/.json from records files")
    m.add_argument("records", nargs="+", metavar="RECORDS", help="JSONL records files (later files win ties)")
    m.add_argument("--out", required=True, metavar="DIR", help="directory to write the matrix into")

    c = sub.add_parser("compare", help="the cells whose verdict changed against a baseline (matrix.json or "
                       "records); exit 1 if a cell that was invariant no longer is")
    c.add_argument("records", nargs="+", metavar="RECORDS", help="JSONL records files of the new run or stack")
    base = c.add_mutually_exclusive_group(required=True)
    base.add_argument("--expect", metavar="MATRIX.json", help="the committed matrix.json")
    base.add_argument("--baseline", action="append", metavar="RECORDS",
                      help="JSONL records of the old stack (repeat for several files), e.g. the torch 2.11 runs")

    loc = sub.add_parser("localize", help="name the first aten op of a model whose probe row depends on its batch")
    from .localize.command import add_arguments

    add_arguments(loc)

    la = sub.add_parser("launch", help="run an engine command under the reference kernels, optionally with an op census")
    from .launch.command import add_arguments as add_launch_arguments

    add_launch_arguments(la)
    ce = sub.add_parser("census", help="print a launch census as a matrix: per op, calls, shapes, routed or not")
    from .launch.report import add_arguments as add_census_arguments

    add_census_arguments(ce)
    pw = sub.add_parser("power", help="the shipped zoo of planted bugs through a configuration: what it catches")
    from .power.command import add_arguments as add_power_arguments

    add_power_arguments(pw)
    fz = sub.add_parser("fuzz", help="search for a co-running workload that changes a greedy probe's bits (hypothesis)")
    from .e2e.fuzz_command import add_arguments as fuzz_arguments

    fuzz_arguments(fz)

    sub.add_parser(
        "serve",
        help="run the bundled inference engine's HTTP server (options: pytest-invariance serve --help)",
        add_help=False,
    )
    return parser


def _matrix(paths: Sequence[str]):
    """The matrix of ``paths``, streamed (one record in memory at a time); skipped lines warned."""
    from .matrix import Matrix
    from .recordio import RecordFileError

    problems: list = []
    try:
        m = Matrix.from_files(list(paths), problems)
    except RecordFileError as e:
        raise UsageError(str(e)) from None
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    if not m.records_read:
        raise _NoRecords(f"no record could be read from {', '.join(paths)}")
    return m


def _cmd_matrix(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a directory")
    m = _matrix(args.records)
    from .matrix import render_matrix

    try:
        paths = render_matrix(m, out)
    except OSError as e:
        raise UsageError(f"--out {args.out}: cannot write there: {e.strerror or e}") from None
    for path in paths.values():
        print(path)
    return EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    from .expect import ExpectedMatrixError, compare_cells, load_expected

    new = _matrix(args.records).cells
    if args.baseline:
        old, against = _matrix(args.baseline).cells, ", ".join(args.baseline)
    else:
        try:
            old, against = load_expected(args.expect), args.expect
        except ExpectedMatrixError as e:
            raise UsageError(str(e)) from None
    changes = compare_cells(old, new)
    for c in changes:
        print(f"{'REGRESSION' if c.regression else 'CHANGED'} {c}")
    regressions = sum(c.regression for c in changes)
    improved = len(changes) - regressions
    if regressions:
        print((f"{improved} other changed cell(s); " if improved else "") + f"{regressions} regression(s) against {against}")
        return EXIT_FOUND
    print((f"{improved} changed cell(s), " if improved else "") + f"no regressions against {against}")
    return EXIT_OK


def _cmd_serve(argv: list[str]) -> int:
    """``serve --help`` needs only the flags (no FastAPI, no torch); serving needs the extra."""
    try:
        from .engine.server_cli import serve_main
    except ImportError as e:
        raise UsageError(f"this installation has no bundled engine server ({e.name or e})") from None
    try:
        rc = serve_main(argv)
    except SystemExit as e:  # the server's own --help
        rc = e.code if isinstance(e.code, int) else EXIT_USAGE
    except ImportError as e:
        raise UsageError(
            f"the bundled engine server needs {e.name or e}; install it with: pip install 'pytest-invariance[engine]'"
        ) from None
    return int(rc or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # serve's options belong to the engine; hand them over untouched.
        if argv and argv[0] == "serve":
            return _cmd_serve(argv[1:])
        try:
            args = _build_parser().parse_args(argv)
        except SystemExit as e:  # --help, --version, or a usage error already printed
            return e.code if isinstance(e.code, int) else EXIT_USAGE
        if args.command == "matrix":
            return _cmd_matrix(args)
        if args.command == "launch":
            from .launch.command import run as launch_run

            return launch_run(args)
        if args.command == "census":
            from .launch.report import main as census_main

            return census_main(args)
        if args.command == "fuzz":
            from .e2e.fuzz_command import run as fuzz_main

            return fuzz_main(args)
        if args.command == "localize":
            from .localize.command import main as localize_main

            return localize_main(args)
        if args.command == "power":
            from .power.command import main as power_main

            return power_main(args)
        return _cmd_compare(args)
    except UsageError as e:
        print(f"pytest-invariance: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except _NoRecords as e:
        print(f"pytest-invariance: error: {e}", file=sys.stderr)
        return EXIT_FOUND


if __name__ == "__main__":
    raise SystemExit(main())
