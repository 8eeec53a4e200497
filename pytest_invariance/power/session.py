"""Power inside a pytest session (the xdist controller only): which configuration the session
runs, its power from the cache or measured once, stamped on each record as it arrives and
summarized at the end.

Modes (ini ``invariance_power`` or ``$PYTEST_INVARIANCE_POWER``; the ``--invariance-power`` flag is ``on``):
``auto`` (default) uses the cache, and on a miss measures the per-op zoo (seconds) the first time
a per-op record arrives; the e2e zoo (minutes) only from the cache. ``on`` also measures the e2e
zoo where the session ran e2e checks, and prints the per-class table. ``off`` measures nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_invariance.oracles.vocabulary import BATCH_SIZE, CACHE, PREFILL_DECODE, RUN_TO_RUN, UNIQUE_SAMPLES

from .config import OP_ORACLES, PowerConfig
from .measure import Measured, get
from .report import oracle_power, summary_line, table_lines

MODES = ("auto", "on", "off")
E2E_ORACLES = (UNIQUE_SAMPLES, CACHE, PREFILL_DECODE, BATCH_SIZE, RUN_TO_RUN)  # of the engine family


def part_of(rec: dict) -> str | None:
    """Which zoo speaks for a record: the e2e zoo for the engine family's sweeps, the per-op zoo
    for the per-op oracles, none for the rest (chunking, precision, world-size...)."""
    if rec.get("family") == "engine":
        return "e2e" if rec.get("oracle") in E2E_ORACLES else None
    return "ops" if rec.get("oracle") in OP_ORACLES else None


class PowerSession:
    def __init__(self, cfg: PowerConfig, mode: str, progress: Callable[[str], None] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"invariance_power must be one of {', '.join(MODES)}, got {mode!r}")
        self.cfg, self.mode, self.progress = cfg, mode, progress
        self.parts: dict[str, Measured | None] = {}
        self.notes: list[str] = []

    def measured(self, part: str) -> Measured | None:
        """The part's power, fetched (or measured, where the mode says so) once per session."""
        if self.mode == "off":
            return None
        if part not in self.parts:
            measure = part == "ops" or self.mode == "on"
            if measure and self.progress is not None and part == "ops":
                self.progress(f"invariance power: measuring the per-op zoo for {self.cfg.describe()} (once; cached)")
            try:
                self.parts[part] = get(self.cfg, part, measure=measure)
            except Exception as exc:  # noqa: BLE001 - power is a note on the verdicts, never their failure
                self.parts[part] = None
                self.notes.append(f"power ({part}) not measured: {type(exc).__name__}: {exc}")
        return self.parts[part]

    def attach(self, rec: dict) -> None:
        """Stamp ``extra.power`` (the kill rate of the zoo classes of this record's oracle)."""
        part = part_of(rec)
        m = self.measured(part) if part else None
        if m is None:
            return
        power = oracle_power([e for e in m.entries if e["layer"] == ("e2e" if part == "e2e" else "op")],
                             rec["oracle"])  # fmt: skip
        if power is not None and isinstance(rec.get("extra"), dict):
            rec["extra"]["power"] = power.as_record(m.digest)

    def lines(self, records: list[dict]) -> list[str]:
        """The summary's power lines: what this configuration catches, and where it is cached."""
        if self.mode == "off":
            return []
        parts = sorted({p for r in records if (p := part_of(r))})
        if not parts:
            return []
        out = []
        for part in parts:
            m = self.measured(part)
            if m is None:
                if part == "e2e":
                    out.append("power (e2e): not measured for this configuration; --invariance-power (or "
                               "pytest-invariance power --e2e) measures it once, in minutes")  # fmt: skip
                continue
            layer = "e2e" if part == "e2e" else "op"
            entries = [e for e in m.entries if e["layer"] == layer]
            oracles = sorted({r["oracle"] for r in records if part_of(r) == part})
            where = f"{m.source} {m.digest}" + (f", {m.seconds:.0f} s to measure" if m.source == "measured" else "")
            shown = oracles if part == "ops" else None
            out.append(f"power ({part}, {self.cfg.describe(shown, part)}): {summary_line(entries, shown)} [{where}]")
            if self.mode == "on":
                out += [f"  {line}" for line in table_lines(entries)]
        return out + self.notes
