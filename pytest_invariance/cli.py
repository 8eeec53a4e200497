"""``pytest-invariance``: render the matrix, compare with a committed one, serve the bundled engine, fuzz a URL.

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

    c = sub.add_parser("compare", help="exit 1 if a cell that was invariant in MATRIX.json no longer is")
    c.add_argument("records", nargs="+", metavar="RECORDS", help="JSONL records files of the new run")
    c.add_argument("--expect", required=True, metavar="MATRIX.json", help="the committed matrix.json")

    loc = sub.add_parser("localize", help="name the first aten op of a model whose probe row depends on its batch")
    from .localize.command import add_arguments

    add_arguments(loc)

    fz = sub.add_parser("fuzz", help="search for a co-running workload that changes a greedy probe's bits (hypothesis)")
    from .e2e.fuzz_command import add_arguments as fuzz_arguments

    fuzz_arguments(fz)

    sub.add_parser(
        "serve",
        help="run the bundled inference engine's HTTP server (options: pytest-invariance serve --help)",
        add_help=False,
    )
    return parser


def _read(paths: Sequence[str]) -> list[dict]:
    from .recordio import RecordFileError, read_records

    try:
        records, problems = read_records(paths)
    except RecordFileError as e:
        raise UsageError(str(e)) from None
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    if not records:
        raise _NoRecords(f"no record could be read from {', '.join(paths)}")
    return records


def _cmd_matrix(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a directory")
    records = _read(args.records)
    from .matrix import render_matrix

    try:
        paths = render_matrix(records, out)
    except OSError as e:
        raise UsageError(f"--out {args.out}: cannot write there: {e.strerror or e}") from None
    for path in paths.values():
        print(path)
    return EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    from .expect import ExpectedMatrixError, compare_with_expected

    records = _read(args.records)
    try:
        regressions = compare_with_expected(records, args.expect)
    except ExpectedMatrixError as e:
        raise UsageError(str(e)) from None
    for r in regressions:
        print(f"REGRESSION {r}")
    if regressions:
        print(f"{len(regressions)} regression(s) against {args.expect}")
        return EXIT_FOUND
    print(f"no regressions against {args.expect}")
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
        if args.command == "fuzz":
            from .e2e.fuzz_command import run as fuzz_main

            return fuzz_main(args)
        if args.command == "localize":
            from .localize.command import main as localize_main

            return localize_main(args)
        return _cmd_compare(args)
    except UsageError as e:
        print(f"pytest-invariance: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except _NoRecords as e:
        print(f"pytest-invariance: error: {e}", file=sys.stderr)
        return EXIT_FOUND


if __name__ == "__main__":
    raise SystemExit(main())
