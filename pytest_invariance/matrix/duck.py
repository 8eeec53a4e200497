"""The fast path of the streaming matrix: DuckDB picks the latest record per configuration.

Why: parsing a 2 KB record into Python objects costs more than everything the matrix then does
with it, and a fleet's records run to millions of lines. DuckDB reads the JSONL in C++ (both
cores), keeps a few key columns per line, and answers which line is the latest of each
configuration (per software stack, the same two rules as ``reduce.Reducer.kept``). Only those
lines, one per configuration, are then parsed by Python and fed to the same reducer, so the cells
are the ones the pure-Python path builds.

Anything unusual sends the caller back to the pure-Python path, which reports bad lines by file
and line: a line DuckDB cannot parse, a row that fails the schema checks here, or a kept line
that does not read back as the record DuckDB described (``Fallback``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..identity import hardware_class, stack_of
from ..oracles.vocabulary import VERDICTS
from ..recordio import Where
from ..records import SCHEMA_MAJOR, SCHEMA_NAME, RecordError, parse_record
from .reduce import Reducer, time_of

STRINGS = ("schema", "run_id", "time", "family", "implementation", "mode", "quantization", "oracle", "verdict",
           "nodeid")  # fmt: skip
# What a hardware class and a software stack are made of (``identity``): pulled out of the small
# hardware and software objects, mapped to class and stack in Python once per distinct tuple.
IDENTITY = (("hardware", "name"), ("hardware", "kind"), ("hardware", "compute_capability"), ("hardware", "isa"),
            ("hardware", "amx"), ("software", "torch"), ("software", "triton"), ("hardware", "cuda"),
            ("hardware", "driver"), ("software", "cublas"), ("software", "cudnn"), ("software", "nccl"))  # fmt: skip
ID_COLUMNS = [f"i{k}" for k in range(len(IDENTITY))] + ["ieng"]


MEMORY_LIMIT = "1GB"


class Fallback(Exception):
    """The fast path cannot vouch for these files: read them the pure-Python way."""


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _scan(con: Any, path: Path, index: int) -> None:
    """One parse of every line: the key columns, the identity parts and a validity flag."""
    columns = ", ".join(f"{name}: 'VARCHAR'" for name in STRINGS) + ", shape: 'JSON', hardware: 'JSON', software: 'JSON'"
    lists = {section: "[" + ", ".join(_quote("$." + f) for s_, f in IDENTITY if s_ == section) + "]"
             for section in ("hardware", "software")}  # fmt: skip
    position = {"hardware": 0, "software": 0}
    parts = []
    for k, (section, _) in enumerate(IDENTITY):
        position[section] += 1
        parts.append(f"{section[0]}x[{position[section]}] AS i{k}")
    ids = ", ".join(parts)
    verdicts = ", ".join(_quote(v) for v in VERDICTS)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE f{index} AS
        SELECT fi, n, {", ".join(STRINGS)}, shape, {ids}, ieng, ok FROM (
        SELECT {index} AS fi, row_number() OVER () - 1 AS n, {", ".join(STRINGS)}, shape::VARCHAR AS shape,
               json_extract_string(hardware, {lists["hardware"]}) AS hx, json_extract_string(software, {lists["software"]}) AS sx,
               json_extract(software, '$.engine')::VARCHAR AS ieng,
               (schema = {_quote(f"{SCHEMA_NAME}/{SCHEMA_MAJOR}")} OR schema LIKE {_quote(f"{SCHEMA_NAME}/{SCHEMA_MAJOR}.%")})
               AND verdict IN ({verdicts}) AND coalesce(family, '') <> '' AND coalesce(implementation, '') <> ''
               AND coalesce(oracle, '') <> '' AND json_type(hardware) = 'OBJECT' AND json_type(software) = 'OBJECT'
               AND coalesce(json_extract_string(hardware, '$.name'), '') <> '' AS ok
        FROM read_json({_quote(str(path))}, format = 'newline_delimited', columns = {{{columns}}}))
    """)  # fmt: skip


def _identities(con: Any, tables: str) -> None:
    """Hardware class and stack per distinct identity tuple, and each time as seconds."""
    import orjson
    import pandas as pd

    rows = con.execute(f"SELECT DISTINCT {', '.join(ID_COLUMNS)} FROM ({tables})").fetchall()
    ident = []
    for row in rows:
        sections: dict[str, dict] = {"hardware": {}, "software": {}}
        for (section, field), value in zip(IDENTITY, row, strict=False):
            sections[section][field] = {"true": True, "false": False}.get(value, value) if field == "amx" else value
        sections["software"]["engine"] = None if row[-1] is None else orjson.loads(row[-1])
        hw, sw = sections["hardware"], sections["software"]
        ident.append((*row, hardware_class(hw), repr(stack_of(hw, sw))))
    con.register("ident", pd.DataFrame(ident, columns=[*ID_COLUMNS, "cls", "stk"], dtype=object))
    times = con.execute(f"SELECT DISTINCT time FROM ({tables})").fetchall()
    con.register("times", pd.DataFrame([(t, time_of(str(t or ""))) for (t,) in times], columns=["t", "ts"]))


def kept_lines(paths: list[Path]) -> tuple[int, dict[int, dict[int, tuple]]]:
    """(records read, {file index: {non-blank line index: (nodeid, time, run id)}}) of the
    lines the matrix keeps. Raises :class:`Fallback` where the Python path must decide."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute(f"SET threads = {max(1, min(4, os.cpu_count() or 1))}")
        con.execute("SET preserve_insertion_order = true")
        con.execute("SET enable_progress_bar = false")  # the CLI prints its own lines only
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")  # the key columns spill to disk past it
        con.execute(f"SET temp_directory = {_quote(tempfile.gettempdir())}")
        try:
            for i, path in enumerate(paths):
                _scan(con, path, i)
        except duckdb.Error as e:  # a line that is not JSON, a file that is not JSONL
            raise Fallback(str(e).splitlines()[0]) from None
        tables = " UNION ALL ".join(f"SELECT * FROM f{i}" for i in range(len(paths)))
        total, bad = con.execute(f"SELECT count(*), count(*) FILTER (WHERE NOT ok) FROM ({tables})").fetchone()
        if bad:
            raise Fallback(f"{bad} line(s) fail the schema checks")
        _identities(con, tables)
        join = " AND ".join(f"a.{c} IS NOT DISTINCT FROM ident.{c}" for c in ID_COLUMNS)
        rows = con.execute(f"""
            WITH b AS (
                SELECT fi, n, nodeid, coalesce(family, '') AS fam, coalesce(implementation, '') AS impl,
                       nullif(mode, '') AS md, nullif(quantization, '') AS quant, coalesce(oracle, '') AS orc,
                       shape, cls, stk, coalesce(run_id, '') AS run, time, ts
                FROM ({tables}) a JOIN ident ON {join} LEFT JOIN times ON a.time IS NOT DISTINCT FROM times.t
            ), w AS (
                SELECT *, row_number() OVER (PARTITION BY nodeid, fam, impl, md, quant, orc, shape, cls, stk
                                             ORDER BY ts DESC, run DESC, fi DESC, n DESC) AS r FROM b
            ), nodes AS (
                SELECT *, first_value(run) OVER (PARTITION BY nodeid, fam, impl, md, quant, orc, cls, stk
                                                 ORDER BY ts DESC, run DESC, fi DESC, n DESC) AS newest FROM w WHERE r = 1
            )
            SELECT fi, n, nodeid, time, run FROM nodes WHERE run = newest
        """).fetchall()  # fmt: skip
    finally:
        con.close()
    kept: dict[int, dict[int, tuple]] = {}
    for fi, n, nodeid, t, run in rows:
        kept.setdefault(fi, {})[n] = (nodeid, t, run)
    return int(total), kept


def reduce_files(paths: list[Path], reducer: Reducer) -> None:
    """Feed ``reducer`` the kept records of ``paths`` with where each is. Raises :class:`Fallback` (nothing added) where the Python path must decide."""
    import orjson

    total, kept = kept_lines(paths)
    found = []
    for fi, path in enumerate(paths):
        want = kept.get(fi, {})
        with open(path, "rb") as fh:
            offset, n = 0, 0
            for raw in fh:
                start, offset = offset, offset + len(raw)
                if not raw.strip():
                    continue
                if n in want:
                    try:
                        rec = parse_record(orjson.loads(raw))
                    except (orjson.JSONDecodeError, RecordError) as e:
                        raise Fallback(f"{path}: line of record {n} reads differently: {e}") from None
                    if (rec["nodeid"], rec["time"], rec["run_id"]) != want[n]:
                        raise Fallback(f"{path}: record {n} is not the line DuckDB counted")
                    found.append((rec, Where(fi, start, len(raw))))
                n += 1
    for position, (rec, where) in enumerate(found):
        reducer.read = position  # positions only break ties between records of one configuration
        reducer.add(rec, where)
    reducer.read = total
