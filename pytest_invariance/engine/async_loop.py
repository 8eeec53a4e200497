"""The bridge between asyncio request handlers and the synchronous engine.

One background thread owns the :class:`LLMEngine`: it alone calls ``add_request``, ``abort``,
``step`` and ``flush_cache``, so the engine needs no locking of its own. Handlers talk to it through
an inbox of commands; each step's outputs come back to the event loop in one
``loop.call_soon_threadsafe`` call and are fanned out to per-request asyncio queues.

Admission is bounded: at most ``max_running + max_queue`` sequences may be admitted and
unfinished; beyond that :class:`Overloaded` is raised and the server answers 503 with
``Retry-After``. A request that was admitted is never dropped: it either finishes, is aborted by
its client (disconnect, stop string), or fails with an error that reaches its handler.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .metrics import Metrics

log = logging.getLogger("pytest_invariance.engine.server")


DRAIN_WINDOW_S = 10.0
MAX_RETRY_AFTER_S = 60.0
MAX_PROMISED = 100_000


class Overloaded(Exception):
    """Admission refused: the bounded queue is full."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__("server overloaded: the request queue is full; retry later")
        self.retry_after_s = retry_after_s


class EngineDead(Exception):
    """The engine thread stopped after an error; no request can be served."""


@dataclass
class SubmitSpec:
    """One sequence to run: its engine request id, prompt ids and ``SamplingParams``."""

    request_id: str
    prompt_token_ids: list[int]
    params: Any


class RequestStream:
    """The outputs of one engine request, consumed with ``async for``.

    Iteration ends after the output marked ``finished``. :meth:`abort` stops the request in the
    engine (client disconnect, stop string matched) and releases its admission slot.
    """

    def __init__(self, owner: AsyncEngine, spec: SubmitSpec) -> None:
        self._owner = owner
        self.request_id = spec.request_id
        self.num_prompt_tokens = len(spec.prompt_token_ids)
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self.accepted: asyncio.Future[None] = owner._loop.create_future()
        self.done = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> Any:
        if self.done and self._queue.empty():
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, BaseException):
            raise item
        if item is None:
            raise StopAsyncIteration
        return item

    def abort(self, outcome: str = "aborted") -> None:
        """Stop this request in the engine; safe to call more than once or after it finished.

        ``outcome`` is the metrics label: ``aborted`` (client gone) or ``finished`` (a stop string
        ended it, which is a normal finish seen from the client).
        """
        if self.done:
            return
        self._owner._abort(self, outcome)

    # called on the event loop thread by AsyncEngine
    def _push(self, item: Any) -> None:
        self._queue.put_nowait(item)

    def _close(self, final: Any = None) -> None:
        if not self.done:
            self.done = True
            self._queue.put_nowait(final)
            self._owner._release(1)


class AsyncEngine:
    """Runs ``engine.step()`` on a background thread while there is work."""

    def __init__(
        self,
        engine: Any,
        *,
        max_running: int,
        max_queue: int,
        metrics: Metrics | None = None,
        retry_after_s: float = 1.0,
    ) -> None:
        self.engine = engine
        self.max_running = max_running
        self.max_queue = max_queue
        self.capacity = max_running + max_queue
        self.metrics = metrics or Metrics()
        self.retry_after_s = retry_after_s
        self._released_at: deque[float] = deque(maxlen=4096)  # when sequences finished, for the drain rate
        self._promised: list[float] = []  # when rejected clients were told to come back, sorted
        self.inflight = 0
        self.error: BaseException | None = None
        self._streams: dict[str, RequestStream] = {}
        self._cond = threading.Condition()
        self._inbox: list[tuple[Any, ...]] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]

    # lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the engine thread; must be called from the event loop that will serve requests."""
        self._loop = asyncio.get_running_loop()
        self._publish_kv()
        self._thread = threading.Thread(target=self._thread_main, name="engine-loop", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the thread after its current step and fail whatever is still in flight."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._cond:
            pending, self._inbox = self._inbox, []
        for cmd in pending:
            if cmd[0] in ("add", "call"):
                self._resolve(cmd[-1], None, EngineDead("server shutting down"))
        for stream in list(self._streams.values()):
            stream._close(EngineDead("server shutting down"))
        self._streams.clear()

    @property
    def alive(self) -> bool:
        """True while the engine thread runs and has not failed."""
        return self._thread is not None and self._thread.is_alive() and self.error is None

    # admission ---------------------------------------------------------------------------------
    def _reserve(self, k: int) -> None:
        if self.error is not None:
            raise EngineDead(f"engine stopped after an error: {self.error!r}")
        if self.inflight + k > self.capacity:
            self.metrics.count_request("rejected_overload")
            raise Overloaded(self._retry_after(k))
        self.inflight += k
        self._publish_load()

    def _retry_after(self, k: int) -> float:
        """When a rejected request of ``k`` sequences should come back: the time for the queue to
        drain far enough at the measured drain rate (sequences finished per second over the last
        ``DRAIN_WINDOW_S``), counting the rejected clients already told to come back before then,
        so that a crowd is spread over the drain instead of returning as one wave each second
        (measured with a fixed 1 s: 1,000 polite clients, 20,685 rejections). Without a measured
        rate (nothing finished lately): ``retry_after_s``, which is also the floor; at most
        ``MAX_RETRY_AFTER_S``."""
        now = time.monotonic()
        released, promised = self._released_at, self._promised
        while released and now - released[0] > DRAIN_WINDOW_S:
            released.popleft()
        del promised[: bisect.bisect_right(promised, now)]
        span = now - released[0] if released else 0.0
        if len(released) < 2 or span <= 0:
            wait = self.retry_after_s
        else:
            rate = len(released) / span
            shortfall = self.inflight + k - self.capacity + len(promised)
            wait = min(MAX_RETRY_AFTER_S, max(self.retry_after_s, shortfall / rate))
        if len(promised) < MAX_PROMISED:
            bisect.insort(promised, now + wait)
        return wait

    def _release(self, k: int) -> None:
        now = time.monotonic()
        self._released_at.extend([now] * k)
        self.inflight -= k
        self._publish_load()

    def _publish_kv(self) -> None:
        blocks = getattr(self.engine, "blocks", None)
        if blocks is not None:
            self.metrics.set_kv(blocks.num_free, blocks.num_blocks)

    def _publish_load(self) -> None:
        self.metrics.set_load(self.inflight, max(0, self.inflight - self.max_running))

    # requests ----------------------------------------------------------------------------------
    async def submit(self, specs: Sequence[SubmitSpec]) -> list[RequestStream]:
        """Admit all ``specs`` or none; returns their streams once the engine has accepted them.

        All sequences are handed to the engine together, so the sequences of one HTTP request
        enter the same step. Raises :class:`Overloaded`, :class:`EngineDead`, or the engine's
        ``ValueError`` for bad input (after aborting any sibling that was accepted).
        """
        if len(specs) > self.capacity:
            raise ValueError(
                f"request expands to {len(specs)} sequences; this server admits at most {self.capacity}"
            )
        for spec in specs:
            if spec.request_id in self._streams:
                raise ValueError(f"request id {spec.request_id!r} is already in use")
        self._reserve(len(specs))
        streams = [RequestStream(self, spec) for spec in specs]
        for stream in streams:
            self._streams[stream.request_id] = stream
        with self._cond:
            dead = self.error is not None or self._stopping
            if not dead:
                for spec, stream in zip(specs, streams, strict=True):
                    self._inbox.append(("add", spec, stream.accepted))
                self._cond.notify()
        if dead:
            for stream in streams:
                self._streams.pop(stream.request_id, None)
                stream._close(None)
            raise EngineDead("engine is not running")
        try:
            results = await asyncio.gather(*(s.accepted for s in streams), return_exceptions=True)
        except asyncio.CancelledError:
            for stream in streams:
                stream.abort()
            raise
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            for stream in streams:
                stream.abort()
            raise failure
        self.metrics.count_request("accepted", sum(s.num_prompt_tokens for s in streams))
        return streams

    def _abort(self, stream: RequestStream, outcome: str) -> None:
        self._streams.pop(stream.request_id, None)
        stream._close(None)
        self.metrics.count_request(outcome)
        with self._cond:
            self._inbox.append(("abort", stream.request_id))
            self._cond.notify()

    async def call(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(engine)`` on the engine thread between two steps and return its result."""
        if self.error is not None:
            raise EngineDead(f"engine stopped after an error: {self.error!r}")
        fut: asyncio.Future[Any] = self._loop.create_future()
        with self._cond:
            if self.error is not None or self._stopping:
                raise EngineDead("engine is not running")
            self._inbox.append(("call", fn, fut))
            self._cond.notify()
        return await fut

    # event-loop side of the thread boundary ----------------------------------------------------
    def _dispatch(self, outputs: list[Any]) -> None:
        for out in outputs:
            stream = self._streams.get(out.request_id)
            if stream is None:
                continue  # aborted by its client; the engine's last words are dropped
            stream._push(out)
            if out.finished:
                self._streams.pop(out.request_id, None)
                self.metrics.count_request("finished")
                stream._close(None)

    def _fail_all(self, error: BaseException, pending: list[tuple[Any, ...]]) -> None:
        for cmd in pending:
            if cmd[0] in ("add", "call"):
                self._resolve(cmd[-1], None, EngineDead(f"engine error: {error!r}"))
        for stream in list(self._streams.values()):
            stream._close(EngineDead(f"engine error: {error!r}"))
        self._streams.clear()

    @staticmethod
    def _resolve(fut: asyncio.Future[Any], result: Any = None, error: BaseException | None = None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    # the engine thread -------------------------------------------------------------------------
    def _apply(self, cmd: tuple[Any, ...]) -> None:
        kind = cmd[0]
        if kind == "add":
            _, spec, fut = cmd
            try:
                self.engine.add_request(spec.request_id, spec.prompt_token_ids, spec.params)
            except Exception as e:  # noqa: BLE001 - bad input is reported to its handler
                self._loop.call_soon_threadsafe(self._resolve, fut, None, e)
            else:
                self._loop.call_soon_threadsafe(self._resolve, fut, None, None)
        elif kind == "abort":
            try:
                self.engine.abort(cmd[1])
            except Exception:  # noqa: BLE001 - aborting a request that already finished is fine
                log.debug("abort of %s ignored", cmd[1], exc_info=True)
        elif kind == "call":
            _, fn, fut = cmd
            try:
                result = fn(self.engine)
            except Exception as e:  # noqa: BLE001 - surfaced to the awaiting handler
                self._loop.call_soon_threadsafe(self._resolve, fut, None, e)
            else:
                self._loop.call_soon_threadsafe(self._resolve, fut, result, None)

    def _thread_main(self) -> None:
        busy = False
        while True:
            with self._cond:
                while not self._inbox and not busy and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                cmds, self._inbox = self._inbox, []
            try:
                for cmd in cmds:
                    self._apply(cmd)
                busy = self.engine.has_unfinished()
                if not busy:
                    continue
                outputs = self.engine.step()
                stats = dict(self.engine.last_step_stats or {})
                generated = sum(1 for o in outputs if o.token_id is not None and o.finish_reason != "abort")
                self.metrics.observe_step(stats, generated)
                self._publish_kv()
                if outputs:
                    self._loop.call_soon_threadsafe(self._dispatch, outputs)
                busy = self.engine.has_unfinished()
            except BaseException as e:  # noqa: BLE001 - a dead engine must not hang its clients
                log.exception("engine step failed; failing all requests")
                with self._cond:
                    self.error = e
                    pending, self._inbox = self._inbox, []
                try:
                    self._loop.call_soon_threadsafe(self._fail_all, e, pending)
                except RuntimeError:
                    pass  # the event loop is already closed
                return
