"""The fast path of the streaming matrix: DuckDB selects the kept records, Python reads only those.

Why: parsing a 2 KB record into Python objects costs more than everything the matrix then does
with it, and a fleet's records run to millions of lines. DuckDB reads each file as lines (both
cores), parses each line once (``json_extract`` of every path the selection needs) and keeps a
few short JSON texts per line. What only Python can say exactly (a hardware class, a software
stack, a canonical shape, a time in seconds, the order of run ids, whether equivalence classes
and a localization read) Python computes once per *distinct* text, with the functions the
pure-Python path uses, and DuckDB joins back. DuckDB then applies the two rules of
``reduce.Reducer.kept`` and answers where the kept lines are; Python reads, parses and reduces
those lines only (one per configuration), by byte offset, never iterating over the file.

Anything the fast path cannot reproduce exactly sends the caller back to the pure-Python path,
which reports bad lines by file and line (``Fallback``): a line that is not UTF-8 or JSON or
holds a carriage return, a line failing ``records.parse_record``'s checks, a node id, run id,
time, mode or quantization that is not a string or null (the Python path keys on such values,
the fast path on text), line lengths that do not add up to the file's size, or a kept line that
does not read back as the record DuckDB described. Where a line repeats a key, the first value
speaks here and the last in Python: such lines are not JSON that any writer here produces.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from ..identity import hardware_class, stack_of
from ..oracles.classes import check_ranges
from ..oracles.vocabulary import VERDICTS
from ..recordio import Where, _loads
from ..records import REQUIRED, SCHEMA_MAJOR, SCHEMA_NAME, RecordError, _check_localization, parse_record
from .reduce import Reducer, shape_text, time_of

# Every path the selection and the checks read, each as JSON text (SQL NULL: absent).
PATHS = ("schema", "run_id", "time", "family", "implementation", "mode", "quantization", "oracle", "verdict",
         "nodeid", "shape", "dtype", "contract", "software", "evidence", "control", "cost", "extra",
         "evidence.first", "evidence.equivalence_classes", "extra.localization")  # fmt: skip
# What a hardware class and a software stack are made of (``identity``): mapped to class and
# stack in Python once per distinct tuple.
IDENTITY = (("hardware", "name"), ("hardware", "kind"), ("hardware", "compute_capability"), ("hardware", "isa"),
            ("hardware", "amx"), ("hardware", "cuda"), ("hardware", "driver"), ("software", "torch"),
            ("software", "triton"), ("software", "cublas"), ("software", "cudnn"), ("software", "nccl"),
            ("software", "engine"))  # fmt: skip
SEP, ABSENT = "\x01", "\x02"  # never in JSON text: control characters are escaped there
MEMORY_LIMIT = "1GB"
MAX_LINE = 16 * 2**20  # read_csv buffers twice that per thread


class Fallback(Exception):
    """The fast path cannot vouch for these files: read them the pure-Python way."""


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


ALL = (*PATHS, *(f"{s}.{f}" for s, f in IDENTITY))


def _x(path: str) -> str:
    return f"x[{ALL.index(path) + 1}]"


def _checks() -> str:
    """True where ``parse_record`` accepts the line and the fast path keys on it exactly."""
    string, obj = "left({0}, 1) = '\"'", "left({0}, 1) = '{{'"
    nonempty = f"({string} AND {{0}} <> '\"\"')"
    schema = re.escape(f'"{SCHEMA_NAME}/{SCHEMA_MAJOR}') + r'(\.[^/"\\]*)?"'
    verdicts = ", ".join(_quote(f'"{v}"') for v in VERDICTS)
    checks = [f"{_x(k)} IS NOT NULL" for k in REQUIRED if k != "hardware"]
    checks += [
        f"regexp_full_match({_x('schema')}, {_quote(schema)})",
        f"{_x('verdict')} IN ({verdicts})",
        nonempty.format(_x("hardware.name")),
    ]  # a string name also says hardware is an object
    checks += [nonempty.format(_x(k)) for k in ("family", "implementation", "oracle")]
    checks += [obj.format(_x(k)) for k in ("evidence", "software")]
    checks += [f"({_x(k)} IS NULL OR {_x(k)} = 'null' OR {obj.format(_x(k))})" for k in ("control", "cost", "extra",
                                                                                           "evidence.first")]  # fmt: skip
    checks += [f"({_x(k)} = 'null' OR {string.format(_x(k))})" for k in ("nodeid", "run_id", "time", "mode",
                                                                         "quantization")]  # fmt: skip
    return " AND ".join(checks)


def _scan(con: Any, path: Path, index: int, create: bool) -> None:
    """One parse of every line into table ``f``, in line order (its ``rowid``; no window function,
    which would keep the scan on one core): its length, the key texts and a validity flag."""
    paths = ", ".join(_quote("$." + p) for p in ALL)
    ident = ", ".join(f"coalesce(x[{len(PATHS) + k + 1}], chr(2))" for k in range(len(IDENTITY)))
    optional = lambda k: f"CASE WHEN {_x(k)} IN ('null', '\"\"') THEN NULL ELSE {_x(k)} END"  # noqa: E731  `or None`
    lines = (f"read_csv({_quote(str(path))}, columns = {{'l': 'VARCHAR'}}, delim = chr(1), quote = '', escape = '', "
             f"header = false, auto_detect = false, new_line = '\\n', max_line_size = {MAX_LINE}, buffer_size = {2 * MAX_LINE})")  # fmt: skip
    select = f"""
        SELECT {index} AS fi, len, blank, NOT blank AND coalesce({_checks()}, false) AS ok,
               {_x("nodeid")} AS nodeid, {_x("family")} AS fam, {_x("implementation")} AS impl,
               {optional("mode")} AS md, {optional("quantization")} AS quant, {_x("oracle")} AS orc,
               {_x("shape")} AS shape, concat_ws(chr(1), {ident}) AS ident, {_x("run_id")} AS run, {_x("time")} AS time,
               {_x("evidence.equivalence_classes")} AS eqc, {_x("extra.localization")} AS loc
        FROM (SELECT len, blank, CASE WHEN blank THEN NULL ELSE json_extract(l, [{paths}])::VARCHAR[] END AS x
              FROM (SELECT coalesce(strlen(l), 0) AS len,
                           l IS NULL OR regexp_full_match(l, '[ \\t\\x0b\\x0c]*') AS blank, l FROM {lines}))
    """  # fmt: skip
    con.execute(f"CREATE TEMP TABLE f AS {select}" if create else f"INSERT INTO f {select}")


def _register(con: Any, name: str, column: str, values: list[tuple], names: list[str]) -> None:
    import pandas as pd

    con.register(name, pd.DataFrame(values, columns=[column, *names], dtype=object))


def _decode(text: str | None) -> Any:
    return None if text is None or text == ABSENT else _loads(text.encode())


def _mappings(con: Any) -> None:
    """Python's meaning of each distinct text, as tables ``ident``, ``shapes``, ``times``,
    ``runs``; raises :class:`Fallback` where equivalence classes or a localization do not read."""
    distinct = lambda col: [t for (t,) in con.execute(f"SELECT DISTINCT {col} FROM f WHERE ok").fetchall()]  # noqa: E731
    for text in distinct("eqc"):
        if text is not None and text != "null":
            try:
                check_ranges(_decode(text))
            except ValueError as e:
                raise Fallback(f"equivalence classes that do not read: {e}") from None
    for text in distinct("loc"):
        if text is not None:
            try:
                _check_localization(_decode(text))
            except RecordError as e:
                raise Fallback(str(e)) from None
    ident = []
    for text in distinct("ident"):
        sections: dict[str, dict] = {"hardware": {}, "software": {}}
        for (section, field), part in zip(IDENTITY, text.split(SEP), strict=True):
            if part != ABSENT:
                sections[section][field] = _decode(part)
        hw, sw = sections["hardware"], sections["software"]
        ident.append((text, hardware_class(hw), repr(stack_of(hw, sw))))
    _register(con, "ident", "ident", ident, ["cls", "stk"])
    _register(con, "shapes", "t", [(t, shape_text(_decode(t))) for t in distinct("shape")], ["c"])
    _register(con, "times", "t", [(t, time_of(str(_decode(t) or ""))) for t in distinct("time")], ["ts"])
    runs = {t: str(_decode(t) or "") for t in distinct("run")}
    rank = {v: r for r, v in enumerate(sorted(set(runs.values())))}
    _register(con, "runs", "t", [(t, rank[v]) for t, v in runs.items()], ["r"])


def _connect() -> Any:
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {max(1, min(4, os.cpu_count() or 1))}")
    con.execute("SET preserve_insertion_order = true")  # a row's rowid is its line's place
    con.execute("SET enable_progress_bar = false")  # the CLI prints its own lines only
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")  # the key columns spill to disk past it
    con.execute(f"SET temp_directory = {_quote(tempfile.gettempdir())}")
    return con


def kept_lines(paths: list[Path]) -> tuple[int, dict[int, dict[int, tuple]]]:
    """(records read, {file index: {line index: (byte offset, length without its newline,
    (node id, time, run id))}}) of the lines the matrix keeps. Raises :class:`Fallback` where
    the Python path must decide."""
    import duckdb

    con = _connect()
    try:
        if not all(p.is_file() for p in paths):
            raise Fallback("a path that is not a file")  # the Python path says which, in one line
        files = [(i, p) for i, p in enumerate(paths) if p.stat().st_size > 0]  # read_csv: no rows
        if not files:
            return 0, {}
        try:
            for k, (i, path) in enumerate(files):
                _scan(con, path, i, create=not k)
        except duckdb.Error as e:  # not UTF-8, not JSON, a carriage return
            raise Fallback(str(e).splitlines()[0]) from None
        total, bad = con.execute("SELECT count(*) FILTER (WHERE NOT blank), count(*) FILTER (WHERE NOT blank AND "
                                 "NOT ok) FROM f").fetchone()  # fmt: skip
        if bad:
            raise Fallback(f"{bad} line(s) fail the schema checks")
        lengths = _lengths(con, files)
        _mappings(con)
        rows = con.execute("""
            WITH b AS (
                SELECT nodeid, fam, impl, md, quant, orc, shapes.c AS shape, cls, stk,
                       {'ts': times.ts, 'run': runs.r, 'pos': f.rowid} AS o
                FROM f JOIN ident USING (ident) JOIN shapes ON f.shape = shapes.t
                       JOIN times ON f.time = times.t JOIN runs ON f.run = runs.t
                WHERE ok
            ), w AS (
                SELECT nodeid, fam, impl, md, quant, orc, cls, stk, max(o) AS o FROM b
                GROUP BY nodeid, fam, impl, md, quant, orc, shape, cls, stk
            ), v AS (
                SELECT o, max(o) OVER (PARTITION BY nodeid, fam, impl, md, quant, orc, cls, stk) AS top FROM w
            )
            SELECT f.fi, f.rowid, f.nodeid, f.time, f.run FROM v JOIN f ON f.rowid = v.o.pos
            WHERE v.o.run = v.top.run ORDER BY f.rowid
        """).fetchall()  # fmt: skip
    finally:
        con.close()
    kept: dict[int, dict[int, tuple]] = {}
    for fi, pos, *texts in rows:
        base, offsets, lens = lengths[fi]
        n = pos - base
        kept.setdefault(fi, {})[n] = (int(offsets[n]), int(lens[n]), tuple(_decode(t) for t in texts))
    return int(total), kept


def _lengths(con: Any, files: list[tuple[int, Path]]) -> dict[int, tuple[int, Any, Any]]:
    """Per file, the rowid of its first line and each line's byte offset and length; raises :class:`Fallback` where the lengths
    and one newline each do not add up to the file's size (lines are not what Python reads)."""
    import numpy as np

    out = {}
    for i, path in files:
        got = con.execute(f"SELECT rowid, len FROM f WHERE fi = {i} ORDER BY rowid").fetchnumpy()
        rowids, lens = got["rowid"], got["len"].astype(np.int64)
        if len(rowids) and rowids[-1] - rowids[0] != len(rowids) - 1:
            raise Fallback(f"{path}: its lines are not one run of rows")
        ends = np.cumsum(lens + 1)
        with open(path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            size = path.stat().st_size + (fh.read(1) != b"\n")
        if not len(ends) or ends[-1] != size:
            raise Fallback(f"{path}: the lines DuckDB read do not add up to the file")
        out[i] = (int(rowids[0]), ends - lens - 1, lens)
    return out


def reduce_files(paths: list[Path], reducer: Reducer) -> None:
    """Feed ``reducer`` the kept records of ``paths`` with where each is, in file and line order.
    Raises :class:`Fallback` (``reducer`` then holds part of them: discard it) where the Python
    path must decide."""
    total, kept = kept_lines(paths)
    position = 0
    for fi, path in enumerate(paths):
        want = kept.get(fi)
        if not want:
            continue
        with open(path, "rb") as fh:
            for n in sorted(want):
                offset, length, described = want[n]
                fh.seek(max(0, offset - 1))
                raw = fh.read(length + 1 + (offset > 0))
                if offset and raw[:1] != b"\n":
                    raise Fallback(f"{path}: line {n + 1} is not where DuckDB counted it")
                raw = raw[1:] if offset else raw
                if raw[length:] not in (b"\n", b""):
                    raise Fallback(f"{path}: line {n + 1} is not where DuckDB counted it")
                try:
                    rec = parse_record(_loads(raw))
                except (ValueError, RecursionError) as e:  # RecordError and JSON errors are ValueErrors
                    raise Fallback(f"{path}: line {n + 1} reads differently: {e}") from None
                if (rec["nodeid"], rec["time"], rec["run_id"]) != described:
                    raise Fallback(f"{path}: line {n + 1} is not the record DuckDB described")
                reducer.read = position  # positions only break ties between records of one configuration
                reducer.add(rec, Where(fi, offset, len(raw)))
                position += 1
    reducer.read = total
