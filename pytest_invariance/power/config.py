"""What a power measurement depends on, and the stable hash it is cached under.

Power is a property of a configuration (profile, trials, limit, seed, repeats, oracles, and for
the e2e zoo the levels and dispatch), not of a run: the same configuration on the same zoo gives
the same answer, so it is measured once and cached by this hash. The zoo's version is part of the
hash, so a changed zoo is measured again. Pure data: no torch, no pytest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace

from pytest_invariance.oracles.vocabulary import BATCH_POSITION, BATCH_SIZE, RUN_TO_RUN

ZOO_VERSION = 1  # bump when a planted class, a twin or the way they are judged changes
OP_ORACLES = (BATCH_SIZE, BATCH_POSITION, RUN_TO_RUN)
PROBABILISTIC_RUNS = 20  # repeated runs of a probabilistic class: its detection rate is failures/20
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
    runs: int = PROBABILISTIC_RUNS
    e2e: bool = False  # whether the e2e fakes are part of this measurement
    extra: dict = field(default_factory=dict, compare=False)  # free-form notes, not hashed

    def key(self, part: str) -> dict:
        """The fields ``part`` ("ops" or "e2e") depends on. Both measure every oracle they have
        (the summary keeps those configured), so ``oracles`` is not part of either key, and a
        session that ran fewer oracles reuses the same measurement; the ops zoo ignores levels
        and dispatch, the e2e zoo ignores repeats."""
        d = {k: v for k, v in asdict(self).items() if k not in ("extra", "e2e", "oracles")}
        if part == "ops":
            d.pop("levels"), d.pop("dispatch")
        else:
            d.pop("repeats")
        return {"zoo": ZOO_VERSION, "part": part, **d}

    def digest(self, part: str) -> str:
        """Stable across processes, machines and Python versions (sorted JSON, sha256)."""
        text = json.dumps(self.key(part), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """``profile quick, trials 3, limit none, oracles batch-size,batch-position,run-to-run``."""
        parts = [f"profile {self.profile}", f"trials {self.trials}", f"limit {self.limit or 'none'}"]
        parts.append(f"oracles {','.join(self.oracles)}")
        if self.e2e:
            parts += [f"levels {','.join(map(str, self.levels)) if self.levels else 'default'}",
                      f"dispatch {self.dispatch}"]  # fmt: skip
        return ", ".join(parts)

    def with_oracles(self, oracles: tuple[str, ...]) -> PowerConfig:
        return replace(self, oracles=tuple(o for o in OP_ORACLES if o in oracles) or OP_ORACLES)
