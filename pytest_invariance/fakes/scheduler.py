"""The fakes' step loop: every running row advances one token per engine step, and the planted
bug decides from the step's composition (or from chance) which rows are computed differently.

A step holds every admitted row: the prompts of each request that arrived before it (a list
request's prompts arrive together, so they share every step) and whatever else is co-resident.
Rows are computed one at a time at one shape, so without a bug nothing a row's neighbours do can
reach it; each bug is one explicit rule below (``_scales``), never a host-BLAS accident. Each
running row holds a KV slot (the lowest free one); what a finished or aborted row leaves in its
slot is read only by the stale-slot bug.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import random
import threading
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field

import numpy as np

from .model import PRINTABLE, TinyModel

BUGS = ("none", "padding", "neighbour", "replay", "warm-cache", "token-budget", "large-batch", "mixed-step",
        "row-index", "sampler-path", "stale-slot", "long-context")  # fmt: skip
NEIGHBOUR_TRIGGERS = ("long-prompt", "shared-prefix", "sampling")
SAMPLER_TRIGGERS = ("top-logprobs", "n", "stream")
STALE_AFTER = ("finish", "abort")
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
    token_budget: int = 2048  # token-budget: a step whose rows hold more tokens than this (all rows)
    batch_threshold: int = 48  # large-batch: steps of at least this many rows take another kernel
    row_from: int = 1  # row-index: rows at this index of their step and later change
    sampler_trigger: str = "top-logprobs"  # sampler-path: what in another request switches the sampler
    stale_after: str = "finish"  # stale-slot: which freed slots keep their contents (every one, or aborted ones)
    split_kv_tokens: int = 1024  # long-context: rows with at least this much context split their KV by batch

    def __post_init__(self) -> None:
        if self.bug not in BUGS:
            raise ValueError(f"bug must be one of {', '.join(BUGS)}, got {self.bug!r}")
        if self.neighbour_trigger not in NEIGHBOUR_TRIGGERS:
            raise ValueError(f"neighbour_trigger must be one of {', '.join(NEIGHBOUR_TRIGGERS)}, "
                             f"got {self.neighbour_trigger!r}")  # fmt: skip
        if self.sampler_trigger not in SAMPLER_TRIGGERS:
            raise ValueError(f"sampler_trigger must be one of {', '.join(SAMPLER_TRIGGERS)}, "
                             f"got {self.sampler_trigger!r}")  # fmt: skip
        if self.stale_after not in STALE_AFTER:
            raise ValueError(f"stale_after must be one of {', '.join(STALE_AFTER)}, got {self.stale_after!r}")
        if min(self.token_budget, self.batch_threshold, self.row_from, self.split_kv_tokens) < 1:
            raise ValueError("token_budget, batch_threshold, row_from and split_kv_tokens must be positive")
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
    n: int = 1  # choices its request asked for (the sampler-path bug's `n` trigger)
    stream: bool = False  # its request is streamed (the sampler-path bug's `stream` trigger)
    steps: int = 0  # engine steps it has run (0 in its prefill step)
    slot: int = -1  # its KV slot while it runs (the stale-slot bug reads the slot's last occupant)
    aborted: bool = False  # its client went away mid-stream: it leaves at the next step
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
        self._staged: list[tuple[tuple[int, ...], np.ndarray]] = []  # this step's new blocks
        self._free = list(range(cfg.max_num_seqs))  # KV slots, lowest first (a heap)
        self._stale: dict[int, list[int]] = {}  # slot -> the sequence its last occupant left there
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

    def abort(self, rows: list[Row]) -> None:
        with self._cond:
            for r in rows:
                r.aborted = True

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
                for r in admitted:
                    r.slot = heapq.heappop(self._free)
                self._running.extend(admitted)
                rows = list(self._running)
            self._step(rows)
            with self._cond:
                self._running = [r for r in self._running if len(r.tokens) < r.max_tokens and not r.aborted]
                done = [r for r in rows if len(r.tokens) >= r.max_tokens or r.aborted]
                for r in done:
                    self._free_slot(r)
            for r in done:
                r.events.put(None)
            if self.cfg.step_s > 0:
                time.sleep(self.cfg.step_s)

    def _free_slot(self, r: Row) -> None:
        """The slot goes back to the pool; its KV is not cleared (the stale-slot bug reads it), except
        where ``stale_after`` is ``abort`` and the row finished normally (the clean release path)."""
        if r.aborted or self.cfg.stale_after == "finish":
            self._stale[r.slot] = r.prompt + r.tokens
        else:
            self._stale.pop(r.slot, None)
        heapq.heappush(self._free, r.slot)

    def _step(self, rows: list[Row]) -> None:
        self.steps_by_batch[len(rows)] += 1
        for r in rows:
            if r.h is None:
                self._prefill(r)
            else:
                r.h = self.model.advance(r.h, r.tokens[-1])
        self._commit()  # blocks computed in this step are visible from the next one, not within it
        for r, scale in zip(rows, self._scales(rows), strict=True):
            if scale:
                r.h = self.model.perturbed(r.h, scale)
                self.perturbed_rows += 1
            self._emit(r)
            r.steps += 1

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
        if cfg.bug == "token-budget":  # split-KV / chunked attention chosen by the step's total tokens
            return [1.0 if sum(len(r.prompt) + len(r.tokens) for r in rows) > cfg.token_budget else 0.0] * n
        if cfg.bug == "large-batch":  # a kernel switch at a batch size that is no ladder edge
            return [1.0 if n >= cfg.batch_threshold else 0.0] * n
        if cfg.bug == "mixed-step":  # decodes run through the prefill kernel while a prefill shares the step
            prefilling = any(r.steps == 0 for r in rows)
            return [1.0 if prefilling and r.steps > 0 else 0.0 for r in rows]
        if cfg.bug == "row-index":  # rows past a tile of the batch reduce in another order
            return [float(1 + i - cfg.row_from) if i >= cfg.row_from else 0.0 for i in range(n)]
        if cfg.bug == "sampler-path":
            return [1.0 if any(self._switches_sampler(o, r) for o in rows) else 0.0 for r in rows]
        if cfg.bug == "stale-slot":
            return [self._stale_tail(r) for r in rows]
        if cfg.bug == "long-context":  # split-KV decode: splits fill the SMs, so fewer as the batch grows
            splits = max(1, 8 // n)
            return [float(splits) if splits > 1 and len(r.prompt) + len(r.tokens) >= cfg.split_kv_tokens else 0.0
                    for r in rows]  # fmt: skip
        return [0.0] * n

    def _switches_sampler(self, other: Row, row: Row) -> bool:
        """Whether ``other`` (another request) moves the step's sampler off the path ``row`` takes alone."""
        if other.request == row.request:
            return False
        trig = self.cfg.sampler_trigger
        if trig == "top-logprobs":  # the batch gathers max-k top logprobs through a full-vocab sort
            return other.top > row.top
        if trig == "n":  # forked prompt blocks of an n > 1 request turn on cascade attention
            return other.n > 1
        return other.stream  # a streamed request syncs the step's logits to the host in another dtype

    def _stale_tail(self, r: Row) -> float:
        """stale-slot: the slot's last occupant left tokens beyond ``r``'s length in ``r``'s current
        KV block, which an unmasked block read takes in; how far depends on what was left there."""
        prev = self._stale.get(r.slot)
        p, bs = len(r.prompt) + len(r.tokens), self.cfg.block_size
        end = min(len(prev), ((p - 1) // bs + 1) * bs) if prev else 0
        return float(1 + sum(prev[p:end]) % 7) if prev and end > p else 0.0

    def _triggers(self, other: Row, row: Row) -> bool:
        """Whether ``other`` (a different prompt: identical copies never trigger) disturbs ``row``."""
        if other.prompt == row.prompt:
            return False
        trig = self.cfg.neighbour_trigger
        if trig == "long-prompt":
            return len(other.prompt) > self.cfg.chunk_tokens
        if trig == "sampling":
            return other.sampling
        k = self.cfg.block_size  # shared-prefix: another prompt that starts as this one
        return len(other.prompt) >= k and other.prompt[:k] == row.prompt[:k]

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
        self._staged.append((key, kept))

    def _commit(self) -> None:
        with self._cache_lock:
            for key, kept in self._staged:
                self._cache[key] = kept
            while len(self._cache) > _CACHE_ENTRIES:
                self._cache.popitem(last=False)
        self._staged.clear()

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
