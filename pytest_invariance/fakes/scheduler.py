"""The fakes' step loop: every running row advances one token per engine step, and the planted
bug decides from the step's composition (or from chance) which rows are computed differently.

A step holds every admitted row: the prompts of each request that arrived before it (a list
request's prompts arrive together, so they share every step) and whatever else is co-resident.
Rows are computed one at a time at one shape, so without a bug nothing a row's neighbours do can
reach it; each bug is one explicit rule below (``_scales``), never a host-BLAS accident.
"""

from __future__ import annotations

import itertools
import queue
import random
import threading
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field

import numpy as np

from .model import PRINTABLE, TinyModel

BUGS = ("none", "padding", "neighbour", "replay", "warm-cache")
NEIGHBOUR_TRIGGERS = ("long-prompt", "shared-prefix", "sampling")
# vLLM v1's default capture sizes to 512 (1, 2, 4, then every 8, then every 16)
DEFAULT_LADDER = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
_CACHE_ENTRIES = 20000


@dataclass(frozen=True)
class FakeConfig:
    """One fake engine: its bug and the knobs of that bug (see the package docstring)."""

    bug: str = "none"
    ladder: tuple[int, ...] = DEFAULT_LADDER
    neighbour_trigger: str = "long-prompt"
    chunk_tokens: int = 256  # long-prompt trigger: a co-resident prompt longer than this
    block_size: int = 16  # prefix-cache granularity; shared-prefix trigger length
    replay_rate: float = 0.02  # replay: chance per multi-request step that one row is perturbed
    prefix_cache: bool = True
    step_s: float = 0.002  # wall time of one engine step (so that concurrent requests overlap)
    max_num_seqs: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if self.bug not in BUGS:
            raise ValueError(f"bug must be one of {', '.join(BUGS)}, got {self.bug!r}")
        if self.neighbour_trigger not in NEIGHBOUR_TRIGGERS:
            raise ValueError(f"neighbour_trigger must be one of {', '.join(NEIGHBOUR_TRIGGERS)}, "
                             f"got {self.neighbour_trigger!r}")  # fmt: skip
        if not self.ladder or min(self.ladder) < 1:
            raise ValueError(f"ladder must be positive batch sizes, got {self.ladder!r}")
        object.__setattr__(self, "ladder", tuple(sorted(set(int(b) for b in self.ladder))))

    def bucket(self, n: int) -> int | None:
        """The captured size a step of ``n`` rows is padded to (None: above the ladder, eager)."""
        return next((b for b in self.ladder if b >= n), None)


@dataclass
class Row:
    """One sequence: a prompt of one request, and what it has produced so far."""

    request: int
    prompt: list[int]
    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    top: int = 0  # top logprobs per token
    sampling: bool = False  # a non-greedy or penalized request (the neighbour bug's `sampling` trigger)
    want_prompt_logprobs: bool = False
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tops: list[list[tuple[int, float]]] = field(default_factory=list)
    prompt_logprobs: list[float | None] | None = None
    cached_tokens: int = 0
    events: queue.Queue = field(default_factory=queue.Queue)  # one index per new token, None at the end
    h: np.ndarray | None = None
    rng: random.Random | None = None


class Scheduler:
    """Runs the step loop on a daemon thread; ``submit`` hands it the rows of one request."""

    def __init__(self, cfg: FakeConfig) -> None:
        self.cfg = cfg
        self.model = TinyModel(cfg.seed)
        self._ids = itertools.count(1)
        self._pending: list[Row] = []
        self._running: list[Row] = []
        self._cond = threading.Condition()
        self._stop = False
        self._chance = random.SystemRandom()  # the replay bug's race: not seeded, on purpose
        self._cache: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.steps_by_batch: dict[int, int] = defaultdict(int)
        self.perturbed_rows = 0
        self._thread = threading.Thread(target=self._loop, name="fake-engine", daemon=True)
        self._thread.start()

    def new_request(self) -> int:
        return next(self._ids)

    def submit(self, rows: list[Row]) -> None:
        with self._cond:
            self._pending.extend(rows)
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def flush_cache(self) -> None:
        with self._cache_lock:
            self._cache.clear()

    # -- the loop ---------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not self._pending and not self._running:
                    self._cond.wait()
                if self._stop:
                    return
                room = self.cfg.max_num_seqs - len(self._running)
                admitted, self._pending = self._pending[:room], self._pending[room:]
                self._running.extend(admitted)
                rows = list(self._running)
            self._step(rows)
            with self._cond:
                self._running = [r for r in self._running if len(r.tokens) < r.max_tokens]
            for r in rows:
                if len(r.tokens) >= r.max_tokens:
                    r.events.put(None)
            if self.cfg.step_s > 0:
                time.sleep(self.cfg.step_s)

    def _step(self, rows: list[Row]) -> None:
        self.steps_by_batch[len(rows)] += 1
        for r in rows:
            if r.h is None:
                self._prefill(r)
            else:
                r.h = self.model.advance(r.h, r.tokens[-1])
        for r, scale in zip(rows, self._scales(rows), strict=True):
            if scale:
                r.h = self.model.perturbed(r.h, scale)
                self.perturbed_rows += 1
            self._emit(r)

    def _scales(self, rows: list[Row]) -> list[float]:
        """The planted bug: how far each row of this step is pushed off its clean value (0: not)."""
        cfg, n = self.cfg, len(rows)
        if cfg.bug == "padding":
            b = cfg.bucket(n)  # padded up to its bucket: the rows run at the bucket's shape
            return [float(1 + cfg.ladder.index(b)) if b is not None and b != n else 0.0] * n
        if cfg.bug == "neighbour":
            return [1.0 if any(self._triggers(o, r) for o in rows if o is not r) else 0.0 for r in rows]
        if cfg.bug == "replay" and len({r.request for r in rows}) > 1 and self._chance.random() < cfg.replay_rate:
            hit = self._chance.randrange(n)  # an unordered reduction: who lands first is a race
            return [1.0 if i == hit else 0.0 for i in range(n)]
        return [0.0] * n

    def _triggers(self, other: Row, row: Row) -> bool:
        trig = self.cfg.neighbour_trigger
        if trig == "long-prompt":
            return len(other.prompt) > self.cfg.chunk_tokens
        if trig == "sampling":
            return other.sampling
        k = self.cfg.block_size  # shared-prefix: another prompt that starts as this one, not a copy
        return other.prompt != row.prompt and len(other.prompt) >= k and other.prompt[:k] == row.prompt[:k]

    def _prefill(self, r: Row) -> None:
        if r.want_prompt_logprobs:
            r.prompt_logprobs, r.h = self.model.prompt_logprobs(r.prompt)
            return
        k, h = self._cached(r.prompt)
        r.cached_tokens = k
        bs = self.cfg.block_size
        for i in range(k, len(r.prompt)):
            h = self.model.advance(h, r.prompt[i])
            if self.cfg.prefix_cache and (i + 1) % bs == 0:
                self._store(tuple(r.prompt[: i + 1]), h)
        r.h = h

    def _cached(self, prompt: list[int]) -> tuple[int, np.ndarray]:
        """The longest cached whole-block prefix, short of the last token (which is always computed)."""
        if self.cfg.prefix_cache:
            bs = self.cfg.block_size
            with self._cache_lock:
                for k in range((len(prompt) - 1) // bs * bs, 0, -bs):
                    h = self._cache.get(tuple(prompt[:k]))
                    if h is not None:
                        self._cache.move_to_end(tuple(prompt[:k]))
                        return k, h.copy()
        return 0, self.model.start()

    def _store(self, key: tuple[int, ...], h: np.ndarray) -> None:
        # warm-cache bug: the cached state is kept at half precision, so a hit resumes from other bits
        kept = h.astype(np.float16).astype(np.float32) if self.cfg.bug == "warm-cache" else h.copy()
        with self._cache_lock:
            self._cache[key] = kept
            if len(self._cache) > _CACHE_ENTRIES:
                self._cache.popitem(last=False)

    def _emit(self, r: Row) -> None:
        lp = self.model.logprobs(r.h)
        if r.temperature > 0:  # seeded per request, so sampling too is batch-invariant on a clean fake
            if r.rng is None:
                r.rng = random.Random(r.seed) if r.seed is not None else random.Random()
            p = np.exp(lp[PRINTABLE].astype(np.float64) / r.temperature)
            tok = int(PRINTABLE[r.rng.choices(range(len(p)), weights=list(p / p.sum()))[0]])
        else:
            tok = self.model.greedy(lp)
        r.tokens.append(tok)
        r.logprobs.append(float(lp[tok]))
        r.tops.append([(t, float(lp[t])) for t in self.model.top(lp, r.top)])
        r.events.put(len(r.tokens) - 1)
