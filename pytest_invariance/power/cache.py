"""Where measured power is kept: one JSON file per (part, configuration hash).

Not pytest's cache (``.pytest_cache`` is per rootdir, off under ``-p no:cacheprovider`` and absent
in pytester runs): a user-level directory, ``$PYTEST_INVARIANCE_CACHE``, else
``$XDG_CACHE_HOME/pytest-invariance``, else ``~/.cache/pytest-invariance``, which CI can keep
between runs (e.g. ``actions/cache`` on that path). Only the xdist controller reads and writes it;
writes are atomic (a temporary file renamed into place), so two sessions measuring the same
configuration at once both leave a whole file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .config import PowerConfig

SCHEMA = "pytest-invariance.power/1"
ENV_DIR = "PYTEST_INVARIANCE_CACHE"


def cache_dir() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-invariance"


def cache_path(cfg: PowerConfig, part: str) -> Path:
    return cache_dir() / f"power-{part}-{cfg.digest(part)}.json"


def load(cfg: PowerConfig, part: str) -> dict | None:
    """The cached measurement of ``part`` for ``cfg``, or None (absent, unreadable or another key)."""
    path = cache_path(cfg, part)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("key") != cfg.key(part):
        return None
    return doc if isinstance(doc.get("entries"), list) else None


def store(cfg: PowerConfig, part: str, entries: list[dict], seconds: float, hardware: str) -> Path | None:
    """Write the measurement; None where the directory cannot be written (then it is simply not cached)."""
    path = cache_path(cfg, part)
    doc = {"schema": SCHEMA, "part": part, "digest": cfg.digest(part), "key": cfg.key(part),
           "seconds": round(seconds, 1), "hardware": hardware, "entries": entries}  # fmt: skip
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        return None
    return path
