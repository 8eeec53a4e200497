"""The launch census on disk: one part per engine process, merged into one file by the launcher.

Why parts: an engine forks and spawns workers; each process writes only its own part
(``FILE.parts/<pid>.json``, replaced atomically at every flush), so no two processes write one
file and a part survives a process that dies. ``merge`` sums the parts per (op, status) into
``FILE``. Plain JSON with a schema name, no torch needed to read it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SCHEMA = "pytest-invariance.census/1"
MAX_SHAPES = 64  # distinct shape rows kept per (op, status); the rest are counted, not listed


class CensusFileError(Exception):
    """A census file that is missing, unreadable or not a census: its message names the file."""


def parts_dir(census: str | Path) -> Path:
    return Path(f"{census}.parts")


def write_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def merge_ops(parts: list[list[dict]]) -> list[dict]:
    """Sum op rows of several processes per (op, status), shape rows per (inputs, dtypes, device)."""
    rows: dict[tuple[str, str], dict] = {}
    for ops in parts:
        for r in ops:
            key = (r["op"], r["status"])
            row = rows.setdefault(key, {"op": r["op"], "status": r["status"], "calls": 0, "shapes": [],
                                        "shapes_dropped": 0, "first": r.get("first"), "last": r.get("last"),
                                        "_seen": {}})  # fmt: skip
            row["calls"] += int(r["calls"])
            row["first"] = min((t for t in (row["first"], r.get("first")) if t is not None), default=None)
            row["last"] = max((t for t in (row["last"], r.get("last")) if t is not None), default=None)
            row["shapes_dropped"] += int(r.get("shapes_dropped", 0))
            for s in r.get("shapes", []):
                sk = json.dumps([s["in"], s["dtypes"], s.get("device")])
                if sk in row["_seen"]:
                    row["_seen"][sk]["calls"] += int(s["calls"])
                elif len(row["shapes"]) < MAX_SHAPES:
                    entry = dict(s)
                    row["shapes"].append(entry)
                    row["_seen"][sk] = entry
                else:
                    row["shapes_dropped"] += int(s["calls"])
    out = []
    for row in rows.values():
        row.pop("_seen")
        row["shapes"].sort(key=lambda s: -s["calls"])
        out.append(row)
    return sorted(out, key=lambda r: (r["op"], r["status"]))


def merge(census: str | Path, command: list[str], exit_status: int | None) -> dict:
    """Merge every part of ``census`` into ``census`` itself; the parts folder is removed after."""
    folder = parts_dir(census)
    procs, ops = [], []
    for part in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(part.read_text())
        except (OSError, ValueError) as exc:
            procs.append({"part": part.name, "error": f"unreadable part: {exc}"})
            continue
        procs.append({k: data.get(k) for k in ("pid", "argv", "started", "flushed", "flush_reason", "calls")})
        ops.append(data.get("ops", []))
    merged = {"schema": SCHEMA, "command": command, "exit_status": exit_status, "processes": procs,
              "ops": merge_ops(ops)}  # fmt: skip
    write_atomic(Path(census), merged)
    for part in folder.glob("*") if folder.is_dir() else []:
        part.unlink(missing_ok=True)
    if folder.is_dir():
        folder.rmdir()
    return merged


def read(path: str | Path) -> dict[str, Any]:
    """A merged census file (or a parts folder left by a launcher that was killed)."""
    p = Path(path)
    if p.is_dir():
        ops = []
        for part in sorted(p.glob("*.json")):
            ops.append(_load(part).get("ops", []))
        return {"schema": SCHEMA, "command": None, "exit_status": None, "processes": [], "ops": merge_ops(ops)}
    data = _load(p)
    if data.get("schema") != SCHEMA:
        raise CensusFileError(f"{path}: not a launch census (schema {data.get('schema')!r}, expected {SCHEMA})")
    return data


def _load(p: Path) -> dict:
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise CensusFileError(f"{p}: no such file") from None
    except (OSError, ValueError) as exc:
        raise CensusFileError(f"{p}: cannot read a census from it ({exc})") from None
    if not isinstance(data, dict):
        raise CensusFileError(f"{p}: not a launch census (a JSON object is expected)")
    return data
