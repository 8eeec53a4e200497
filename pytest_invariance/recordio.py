"""Record files: append-only JSONL, one record per line.

Append-only and fsynced per call so that a run interrupted midway (a crashed
worker, a killed CI job) keeps every record written before it. Reading is
forgiving line by line, because a committed records file that lost its last
line must still render a matrix: a bad line becomes a *problem* with its file
and line number and is skipped, never a crash. Only a file that cannot be read
at all is an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import orjson
except ImportError:  # a --no-deps install (a GPU image): the standard parser reads the same lines
    orjson = None

from .records import SCHEMA_MAJOR, SCHEMA_NAME, Record, RecordError, parse_record

__all__ = ["SCHEMA_MAJOR", "SCHEMA_NAME", "Problem", "RecordFileError", "RecordLoader", "Where", "append_records",
           "check_record", "read_records", "scan_records"]  # fmt: skip


class RecordFileError(Exception):
    """A records file that cannot be read at all (missing, a directory, no permission)."""


@dataclass(frozen=True)
class Problem:
    """One skipped line of a records file, with where it was and why."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}, line skipped"


def _dumps(record: Mapping[str, Any]) -> str:
    if not isinstance(record, Mapping):
        raise TypeError(f"a record must be a mapping, got {type(record).__name__}")
    try:
        # allow_nan=False: a bare NaN is not JSON and would make the line unreadable elsewhere.
        return json.dumps(dict(record), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"record {record.get('nodeid')!r} is not plain JSON: {e}") from None


def append_records(path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]]) -> int:
    """Append ``records`` to the JSONL file at ``path``; returns how many were written.

    Every record is serialized before the file is touched, so a record that is
    not JSON leaves the file unchanged instead of half-written. Parent
    directories are created. The data is flushed and fsynced before returning.
    """
    lines = [_dumps(r) + "\n" for r in records]
    if not lines:
        return 0
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(lines).encode("utf-8")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        # A file whose last line was cut short would glue our first record onto it.
        if os.fstat(fd).st_size > 0 and not _ends_with_newline(p):
            data = b"\n" + data
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(lines)


def _ends_with_newline(p: Path) -> bool:
    with open(p, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def check_record(obj: Any) -> str | None:
    """Why ``obj`` is not a readable record (``None`` when it is one)."""
    try:
        parse_record(obj)
    except RecordError as e:
        return str(e)
    return None


def _open(path: Path):
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the caller's with
    except FileNotFoundError:
        raise RecordFileError(f"records file not found: {path}") from None
    except IsADirectoryError:
        raise RecordFileError(f"records path is a directory, not a file: {path}") from None
    except OSError as e:
        raise RecordFileError(f"cannot read records file {path}: {e.strerror or e}") from None
    if os.path.isdir(path):
        fh.close()
        raise RecordFileError(f"records path is a directory, not a file: {path}")
    return fh


def _loads(raw: bytes) -> Any:
    """orjson where it can (several times faster); the standard parser for its error messages and
    for what only it accepts (a bare NaN), so a line reads the same either way."""
    if orjson is not None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw.decode("utf-8"))


@dataclass(frozen=True)
class Where:
    """Where a record's line is: enough to read it again without holding it (``load``)."""

    file: int  # index into the paths given to ``scan_records``
    offset: int
    length: int


def scan_records(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], problems: list[Problem]
) -> Iterator[tuple[Record, Where]]:
    """Stream every record of ``paths`` in file and line order with where it is, one line in memory
    at a time; skipped lines go to ``problems`` (see :func:`read_records`)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    for index, raw_path in enumerate(paths):
        name = str(raw_path)
        with _open(Path(raw_path)) as fh:
            offset = 0
            for lineno, raw in enumerate(fh, start=1):
                start, offset = offset, offset + len(raw)
                if not raw.strip():
                    continue
                rec = _parse_line(raw, name, lineno, problems)
                if rec is not None:
                    yield rec, Where(index, start, len(raw))


def _parse_line(raw: bytes, name: str, lineno: int, problems: list[Problem]) -> Record | None:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        problems.append(Problem(name, lineno, f"not UTF-8 ({e.reason} at byte {e.start})"))
        return None
    try:
        obj = _loads(raw)
    except json.JSONDecodeError as e:
        problems.append(Problem(name, lineno, f"invalid JSON ({e.msg} at column {e.colno})"))
        return None
    except RecursionError:
        problems.append(Problem(name, lineno, "invalid JSON (nested too deeply)"))
        return None
    try:
        return parse_record(obj)
    except RecordError as e:
        problems.append(Problem(name, lineno, str(e)))
        return None


class RecordLoader:
    """Reads records again by :class:`Where`, keeping the files open until closed."""

    def __init__(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        self.paths = [Path(p) for p in paths]
        self._files: dict[int, Any] = {}

    def load(self, where: Where) -> Record:
        fh = self._files.get(where.file)
        if fh is None:
            fh = self._files[where.file] = _open(self.paths[where.file])
        fh.seek(where.offset)
        return parse_record(_loads(fh.read(where.length)))

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()
        self._files.clear()


def read_records(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> tuple[list[Record], list[Problem]]:
    """Read every record from ``paths`` in file and line order.

    Returns ``(records, problems)``: lines that are not valid JSON, not UTF-8,
    not an object, or not a record of a schema version we understand are
    skipped and reported. Blank lines are ignored. Raises
    :class:`RecordFileError` naming the file when a file cannot be read.
    """
    problems: list[Problem] = []
    records = [rec for rec, _ in scan_records(paths, problems)]
    return records, problems
