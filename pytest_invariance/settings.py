"""Per-session settings of the ``invariance`` fixture: plain data, read by the plugin at configure time."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Settings:
    """Per-session settings the fixture needs (serializable, copied to workers)."""

    run_id: str
    profile: str = "quick"
    trials: int = 3
    seed: int = 0
    repeats: int = 5
    limit: int | None = None  # --invariance-limit: largest batch swept when a check names none
