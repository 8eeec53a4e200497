"""What a power measurement depends on, and the stable hash it is cached under.

Power is a property of a configuration (profile, trials, limit, seed, repeats, oracles, and for
the e2e zoo the levels and dispatch), not of a run: the same configuration on the same zoo gives
the same answer, so it is measured once and cached by this hash. The zoo's version is part of the
hash, so a changed zoo is measured again. Pure data: no torch, no pytest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from pytest_invariance.oracles.vocabulary import BATCH_POSITION, BATCH_SIZE, RUN_TO_RUN

ZOO_VERSION = 4  # bump when a planted class, a twin or the way they are judged changes
OP_ORACLES = (BATCH_SIZE, BATCH_POSITION, RUN_TO_RUN)
PROBABILISTIC_RUNS = 10  # repeated runs of a probabilistic class: its detection rate is seen/10
CAUGHT_AT = 0.95  # a probabilistic class counts as caught when detected in at least 95% of runs


@dataclass(frozen=True)
class PowerConfig:
    """The user's configuration as far as the zoo's verdicts depend on it."""

    profile: str = "quick"
    trials: int = 3
    limit: int | None = None
    seed: int = 0
    repeats: int = 5
    oracles: tuple[str, ...] = OP_ORACLES
    levels: tuple[int, ...] | None = None  # e2e: --invariance-levels (None: the suites' default)
    dispatch: str = "list"  # e2e: --invariance-dispatch
    replays: int | None = None  # e2e: --invariance-replays (None: the suite's default)
    runs: int = PROBABILISTIC_RUNS

    def key(self, part: str) -> dict:
        """The fields ``part`` ("ops" or "e2e") depends on. Both measure every oracle they have
        (the summary keeps those configured), so ``oracles`` is not part of either key, and a
        session that ran fewer oracles reuses the same measurement; the ops zoo ignores levels
        and dispatch, the e2e zoo ignores repeats."""
        d = {k: v for k, v in asdict(self).items() if k != "oracles"}
        if part == "ops":
            d.pop("levels"), d.pop("dispatch"), d.pop("replays")
        else:
            d.pop("repeats")
        return {"zoo": ZOO_VERSION, "part": part, **d}

    def digest(self, part: str) -> str:
        """Stable across processes, machines and Python versions (sorted JSON, sha256)."""
        text = json.dumps(self.key(part), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self, oracles: tuple[str, ...] | list[str] | None = None, part: str = "ops") -> str:
        """``profile quick, trials 3, limit none, oracles batch-size,run-to-run`` (ops) or
        ``profile quick, levels default, dispatch list`` (e2e)."""
        if part == "e2e":
            levels = ",".join(map(str, self.levels)) if self.levels else "default"
            replays = f", replays {self.replays}" if self.replays else ""
            return f"profile {self.profile}, levels {levels}, dispatch {self.dispatch}{replays}"
        parts = [f"profile {self.profile}", f"trials {self.trials}", f"limit {self.limit or 'none'}"]
        return ", ".join([*parts, f"oracles {','.join(oracles if oracles is not None else self.oracles)}"])
