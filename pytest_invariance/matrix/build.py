"""The matrix built once from records, in memory or streamed from JSONL files.

``Matrix.from_files`` is the CLI's path: one line in memory at a time, memory proportional to the
configurations (``reduce``). ``Matrix.build`` takes records already in memory (the plugin's own
session, tests). Every renderer reads the same :class:`Matrix`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from ..recordio import RecordLoader, scan_records
from ..records import Record
from .model import _cell_sort_key
from .reduce import Reduced, Reducer


def build_cells(records: Iterable[Record]) -> list[dict]:
    """Matrix cells, one per (family, implementation, mode, quantization, hardware, oracle), sorted."""
    return Matrix.build(records).cells


def latest_records(records: Iterable[Record]) -> list[Record]:
    """One record per configuration (``records.record_key``, which includes the software stack):
    the one with the latest ``time``; and of one test node (same node id, implementation, mode,
    quantization, oracle, hardware class, stack), only the records of its latest run.

    Ties on time go to the later run id, then to the record read last. The second rule is why a
    suite whose defaults changed (another prompt length, another model preset) does not leave its
    older shapes' verdicts standing beside the new ones: the latest run of a test says what that
    test finds now, with every shape it ran.
    """
    reducer = Reducer()
    for rec in records:
        reducer.add(rec)
    return [e.handle for e in reducer.kept()]


@dataclass(frozen=True)
class Matrix:
    """What every renderer reads: counts, the cells, row costs, plot items and the hardware."""

    records_read: int
    records_kept: int
    runs: int
    cells: list[dict]
    row_costs: dict[tuple, dict]
    plots: list
    hardware: dict[str, dict]

    @classmethod
    def build(cls, records: Iterable[Record]) -> Matrix:
        """From records in memory (each is its own representative)."""
        reducer = Reducer()
        for rec in records:
            reducer.add(rec)
        return cls._of(reducer.finish())

    @classmethod
    def from_files(cls, paths: list, problems: list, fast: bool = True) -> Matrix:
        """Streaming from JSONL files: memory follows configurations, representatives are read
        again; skipped lines go to ``problems`` (``recordio.Problem``). ``fast``: DuckDB picks the
        kept lines where it is installed (``duck``); the pure-Python pass otherwise, and always
        where DuckDB cannot vouch for every line (it reports bad lines by file and line)."""
        paths = [Path(p) for p in paths]
        reducer = None
        if fast and find_spec("duckdb") is not None and find_spec("orjson") is not None:
            from .duck import Fallback, reduce_files

            reducer = Reducer()
            try:
                reduce_files(paths, reducer)
            except Fallback:
                reducer = None
        if reducer is None:
            reducer = Reducer()
            for rec, where in scan_records(paths, problems):
                reducer.add(rec, where)
        loader = RecordLoader(paths)
        try:
            return cls._of(reducer.finish(loader.load))
        finally:
            loader.close()

    @classmethod
    def _of(cls, r: Reduced) -> Matrix:
        cells = sorted(r.cells, key=_cell_sort_key)
        return cls(r.records_read, r.records_kept, r.runs, cells, r.row_costs, r.plots, r.hardware)
