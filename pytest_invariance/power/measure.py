"""Power for a configuration: from the cache, else measured (and cached).

``ops`` is the per-op zoo (seconds on a CPU), ``e2e`` the fake engines through the shipped e2e
suites (minutes); each part is cached on its own key, so a change of levels or dispatch measures
the e2e part again and leaves the per-op part alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from . import cache
from .config import PowerConfig

PARTS = ("ops", "e2e")


@dataclass
class Measured:
    part: str
    entries: list[dict]
    digest: str
    source: str  # "cached" | "measured"
    seconds: float
    path: str | None  # the cache file (None: could not be written)


def get(cfg: PowerConfig, part: str, *, measure: bool = True, progress: Callable[[dict], None] | None = None,
        records: list[dict] | None = None, refresh: bool = False) -> Measured | None:
    """The ``part`` of ``cfg``'s power: cached, else measured when ``measure`` (None otherwise).
    ``records`` (ops only) collects the fixture records of a fresh measurement."""
    if part not in PARTS:
        raise ValueError(f"unknown power part {part!r}; expected one of {', '.join(PARTS)}")
    doc = None if refresh else cache.load(cfg, part)
    if doc is not None:
        return Measured(part, doc["entries"], doc["digest"], "cached", float(doc.get("seconds") or 0),
                        str(cache.cache_path(cfg, part)))  # fmt: skip
    if not measure:
        return None
    t0 = time.perf_counter()
    if part == "ops":
        from .ops import measure_ops

        entries = measure_ops(cfg, records=records, progress=progress)
    else:
        from .e2e import measure_e2e

        entries = measure_e2e(cfg, progress=progress)
    seconds = time.perf_counter() - t0
    from pytest_invariance import hardware

    path = cache.store(cfg, part, entries, seconds, hardware.fingerprint()["hardware"]["name"])
    return Measured(part, entries, cfg.digest(part), "measured", seconds, str(path) if path else None)
