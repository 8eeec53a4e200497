"""One client interface over every engine: prompts in, token ids / text / logprobs out.

Why token ids: text is lossy (two tokenizations can decode to the same string), so every adapter
returns ids where the server offers them and says so where it does not. Why the strict error
policy: a sweep that silently drops a failed request reports fewer unique samples than the engine
produced, so every failure is an :class:`AdapterError` naming the URL and the field, and only
failures that cannot change a verdict are retried: a refused connect a bounded number of times, a
503 with ``Retry-After`` (the engine's queue or its connection cap) after the wait it names, for as
long as the request's deadline allows, then ``overloaded``. Every request carries a timeout and a
deadline, so nothing hangs.
"""

from __future__ import annotations

import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import requests

from .transport import describe_failure, exchange, never_connected

Prompt = str | list[int]

INDEPENDENT = "independent"  # one HTTP connection per request, arrivals jittered
LIST = "list"  # one request carrying the whole list
DISPATCH = (INDEPENDENT, LIST)


class AdapterError(Exception):
    """A request failed or its answer lacked what we need: one line, URL and field named."""

    def __init__(self, url: str, field: str, message: str) -> None:
        self.url, self.field, self.message = url, field, " ".join(str(message).split())
        super().__init__(f"{url}: {field}: {self.message}")


@dataclass(frozen=True)
class GenParams:
    """Sampling parameters every adapter can express. ``logprobs``: top-k per generated token
    (0: only the chosen token's logprob; None: none). ``prompt_logprobs``: same for the prompt."""

    max_tokens: int = 16
    temperature: float = 0.0
    seed: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    ignore_eos: bool = True


@dataclass
class Completion:
    """One request's answer. Lists are per generated token; prompt lists per prompt token."""

    token_ids: list[int]
    text: str = ""
    prompt_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None
    prompt_logprobs: list[float | None] | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    latency_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def _retry_after(resp: requests.Response) -> float | None:
    ms = resp.headers.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = resp.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


class Progress:
    """Progress of a sweep: a line at each quarter (``single bundled[invariant]: 8/31``) through
    :mod:`pytest_invariance.adapters.progress`, which reaches the terminal while pytest captures; given a
    ``stream`` that is a terminal, ``\\r`` updates there instead."""

    def __init__(self, total: int, label: str, stream: Any = None, enabled: bool = True) -> None:
        self.total, self.label, self.done = max(total, 1), label, 0
        self.stream = stream
        self.enabled = enabled
        self.tty = stream is not None and bool(getattr(stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._last_quarter = -1

    def advance(self, n: int = 1) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.done += n
            frac = min(self.done / self.total, 1.0)
            if self.tty:
                bar = "#" * int(frac * 24)
                self.stream.write(f"\r{self.label} [{bar:<24}] {self.done}/{self.total}")
                if self.done >= self.total:
                    self.stream.write("\n")
                self.stream.flush()
            else:
                quarter = int(frac * 4)
                if quarter > self._last_quarter:
                    self._last_quarter = quarter
                    line = f"{self.label}: {self.done}/{self.total}"
                    if self.stream is None:
                        from .progress import emit

                        emit(line)
                    else:
                        self.stream.write(line + "\n")
                        self.stream.flush()


class Adapter(ABC):
    """Base client. Subclasses build request bodies and parse answers; this class owns transport,
    timeouts, retries and concurrency."""

    engine = "openai"

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 5.0,
        retries: int = 3,
        api_key: str | None = None,
        model: str | None = None,
        deadline_s: float | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s  # None: default_deadline() of each request
        self.connect_timeout_s = connect_timeout_s
        self.retries = retries
        self.api_key = api_key
        self.model = model
        self._unresponsive: AdapterError | None = None

    # -- transport ------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout_s: float | None = None,
        expect_json: bool = False,
    ) -> Any:
        """One HTTP exchange on a fresh connection; returns parsed JSON (or text for non-JSON unless
        ``expect_json``).

        The one place where transport fails: whatever goes wrong (a bad URL, refused, reset, a body
        cut short, a timeout, the deadline, an unparsable answer) leaves as an :class:`AdapterError`
        naming the URL and what failed, in one line, so a sweep ends in an ``incomplete`` verdict
        rather than a traceback. After a timeout or a missed deadline the target counts as
        unresponsive: later requests fail at once with that reason, so a server that never answers
        costs one deadline per adapter rather than one per request."""
        url = self.base_url + path
        if self._unresponsive is not None:
            raise AdapterError(url, self._unresponsive.field, f"not sent: {self._unresponsive.message}")
        read_s = timeout_s or self.timeout_s
        deadline_s = self.deadline_s or default_deadline(read_s, body)
        ends = time.monotonic() + deadline_s
        attempt = overloaded = 0
        while True:
            try:
                resp = exchange(method, url, body=body, headers=self._headers(),
                                timeout=(self.connect_timeout_s, read_s),
                                deadline_s=max(ends - time.monotonic(), 0.001))  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - every transport failure becomes one AdapterError
                if never_connected(exc) and attempt < self.retries:
                    attempt += 1
                    time.sleep(0.1 * 2 ** (attempt - 1))
                    continue
                err = AdapterError(url, *describe_failure(exc, self.connect_timeout_s, read_s))
                if overloaded and err.field == "deadline":  # it ran out while backing off 503s: the cause
                    raise AdapterError(url, "overloaded", f"HTTP 503 with Retry-After {overloaded} time(s), then "
                                       f"the request deadline ({deadline_s:g} s; --invariance-request-deadline "
                                       f"raises it) passed during the next attempt") from None  # fmt: skip
                if err.field in ("timeout", "deadline"):
                    self._unresponsive = AdapterError(
                        self.base_url, err.field, f"an earlier request to {url} failed: {err.message}"
                    )
                raise err from None
            wait = _retry_after(resp) if resp.status_code == 503 else None
            if wait is None:
                return _decode(resp, url, expect_json)
            # Overloaded, and the server said when to come back: back off while the deadline allows.
            overloaded += 1
            wait = max(wait, 0.0)
            if time.monotonic() + wait >= ends:
                raise AdapterError(url, "overloaded", f"HTTP 503 with Retry-After {overloaded} time(s); "
                                   f"waiting {wait:g} s more would pass the request deadline ({deadline_s:g} s; "
                                   f"--invariance-request-deadline raises it): {_error_text(resp)}")  # fmt: skip
            time.sleep(wait)

    def post(self, path: str, body: Any) -> Any:
        """POST a JSON body, expect a JSON answer."""
        return self.request("POST", path, body, expect_json=True)

    def get(self, path: str, timeout_s: float | None = None) -> Any:
        return self.request("GET", path, timeout_s=timeout_s)

    def url(self, path: str) -> str:
        return self.base_url + path

    # -- engine facts ---------------------------------------------------------------------------
    def health(self) -> bool:
        """True when ``/health`` answers 200 (False on 503 or no answer)."""
        try:
            r = requests.get(
                self.url("/health"), headers=self._headers(), timeout=(self.connect_timeout_s, 10)
            )
        except requests.RequestException:
            return False
        return r.status_code == 200

    def server_info(self) -> dict | None:
        """The server's reported configuration, or None where the engine exposes none."""
        return None

    def mode(self, info: dict | None) -> str | None:
        """``invariant`` / ``default`` from the reported configuration (None: not reported)."""
        if not info:
            return None
        if "enable_deterministic_inference" in info:
            return "invariant" if info["enable_deterministic_inference"] else "default"
        if info.get("mode") in ("invariant", "default"):
            return info["mode"]
        return None

    def flush_cache(self) -> bool:
        """Drop cached prefixes; False where the engine offers no way to."""
        return False

    def post_succeeds(self, path: str) -> bool:
        """POST ``path`` with no body: whether the server accepted it (a failure is an answer here)."""
        try:
            self.request("POST", path)
        except AdapterError:
            return False
        return True

    def step_batch_sizes(self) -> dict[int, int] | None:
        """Engine steps run so far by exact batch size (None where the engine does not report them).
        A sweep diffs two readings to show whether its requests were really co-batched."""
        return None

    def speculative_stats(self) -> dict[str, int] | None:
        """Cumulative ``draft_tokens`` / ``accepted_tokens`` of speculative decoding (None: not
        reported). The bundled engine reports them in ``/server_info``; a speculative check diffs
        two readings to prove drafts were accepted over exactly its batch."""
        stats = (self.server_info() or {}).get("speculative_stats")
        return stats if isinstance(stats, dict) else None

    # -- generation -----------------------------------------------------------------------------
    @abstractmethod
    def generate_one(self, prompt: Prompt, params: GenParams) -> Completion:
        """One request, one prompt."""

    @abstractmethod
    def generate_list(self, prompts: Sequence[Prompt], params: GenParams) -> list[Completion]:
        """One request carrying a list of prompts; answers in input order."""

    def _parsed(self, call: Any, *args: Any) -> Any:
        """``call(*args)`` with an answer too malformed for the parser's own checks (a string where a
        list of triples was due, say) turned into an AdapterError, so it too ends in a verdict."""
        try:
            return call(*args)
        except AdapterError:
            raise
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise AdapterError(self.base_url, "body", f"malformed answer: {type(exc).__name__}: {exc}") from None

    def generate(
        self,
        prompts: Sequence[Prompt],
        params: GenParams | Sequence[GenParams],
        *,
        dispatch: str = INDEPENDENT,
        jitter_ms: tuple[float, float] = (0.0, 0.0),
        seed: int = 0,
        progress: Progress | None = None,
    ) -> list[Completion]:
        """All prompts, in order. ``independent``: one thread and connection per request, request
        i sent at a seeded random offset drawn from ``jitter_ms`` after request i-1 (so arrivals
        interleave with running decodes); ``list``: one request with every prompt."""
        plist = [params] * len(prompts) if isinstance(params, GenParams) else list(params)
        if len(plist) != len(prompts):
            raise ValueError("one GenParams per prompt")
        if dispatch == LIST:
            if len({p for p in plist}) != 1:
                raise ValueError("a list request carries one set of sampling parameters")
            out = self._parsed(self.generate_list, list(prompts), plist[0])
            if progress:
                progress.advance(len(prompts))
            return out
        if dispatch != INDEPENDENT:
            raise ValueError(f"dispatch must be one of {DISPATCH}")
        rng = random.Random(seed)
        offsets, t = [], 0.0
        for i in range(len(prompts)):
            if i:
                t += rng.uniform(*jitter_ms) / 1000.0
            offsets.append(t)
        start = time.monotonic() + 0.01
        cancelled = threading.Event()

        def one(i: int) -> Completion:
            delay = start + offsets[i] - time.monotonic()
            if delay > 0:
                cancelled.wait(delay)
            if cancelled.is_set():
                raise AdapterError(self.base_url, "cancelled", "an earlier request in this sweep failed")
            t0 = time.monotonic()
            try:
                c = self._parsed(self.generate_one, prompts[i], plist[i])
            except AdapterError:
                cancelled.set()
                raise
            c.latency_s = time.monotonic() - t0
            if progress:
                progress.advance()
            return c

        with ThreadPoolExecutor(max_workers=max(1, len(prompts))) as pool:
            futures = [pool.submit(one, i) for i in range(len(prompts))]
            results: list[Completion] = []
            first_error: AdapterError | None = None
            for f in futures:
                try:
                    results.append(f.result())
                except AdapterError as exc:
                    if first_error is None or first_error.field == "cancelled":
                        first_error = exc
        if first_error is not None:
            raise first_error
        return results


DEADLINE_SLACK_S = 10.0  # beyond the read timeout, so that silence is named a timeout, not the deadline
DEADLINE_PER_TOKEN_S = 1.0  # per token requested


def default_deadline(read_s: float, body: Any) -> float:
    """The default wall-clock bound of one request: its read timeout plus ``DEADLINE_SLACK_S`` plus
    ``DEADLINE_PER_TOKEN_S`` per token it asks for (``max_tokens`` or SGLang's ``max_new_tokens``),
    so a long decode is not cut off while a drip still is."""
    tokens = 0
    if isinstance(body, dict):
        sp = body.get("sampling_params")
        raw = body.get("max_tokens", sp.get("max_new_tokens") if isinstance(sp, dict) else None)
        if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
            tokens = raw
    return read_s + DEADLINE_SLACK_S + DEADLINE_PER_TOKEN_S * tokens


def _decode(resp: requests.Response, url: str, expect_json: bool) -> Any:
    """The answer's JSON (or text); an error status or an unparsable body as an AdapterError."""
    if resp.status_code >= 400:
        raise AdapterError(url, "status", f"HTTP {resp.status_code}: {_error_text(resp)}")
    ctype = resp.headers.get("content-type", "")
    if "json" not in ctype:
        if expect_json:
            raise AdapterError(url, "body", f"expected JSON, got {ctype or 'no content type'}: {resp.text[:80]!r}")
        return resp.text
    try:
        return resp.json()
    except (ValueError, RecursionError):
        raise AdapterError(url, "body", "response is not valid JSON") from None


def _error_text(resp: requests.Response) -> str:
    try:
        body = resp.json()
    except (ValueError, RecursionError):
        return (resp.text or resp.reason or "")[:200]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:200]
        return str(err)[:200]
    return str(body)[:200]


def need(obj: Any, path: str, url: str, kind: type | tuple[type, ...] | None = None, at: str = "") -> Any:
    """``obj[a][0][b]`` from ``"a[0].b"``; AdapterError naming the URL and the field (``at`` + path,
    ``at`` locating ``obj`` in the response) when absent or of the wrong type."""
    lookup, path = path, (f"{at}.{path}" if at and not path.startswith("[") else at + path)
    cur = obj
    for part in lookup.replace("]", "").replace("[", ".").split("."):
        if part == "":
            continue
        if isinstance(cur, list) and part.isdigit():
            idx = int(part)
            if idx >= len(cur):
                raise AdapterError(url, path, f"missing (list has {len(cur)} entries)")
            cur = cur[idx]
        elif isinstance(cur, dict):
            if part not in cur:
                raise AdapterError(url, path, "missing from the response")
            cur = cur[part]
        else:
            raise AdapterError(
                url, path, f"wrong shape: expected an object or list, got {type(cur).__name__}"
            )
    if kind is not None:
        kinds = _as_tuple(kind)
        if not isinstance(cur, kinds) or (isinstance(cur, bool) and bool not in kinds):
            names = "/".join(k.__name__ for k in kinds)
            raise AdapterError(url, path, f"wrong shape: expected {names}, got {type(cur).__name__}")
    return cur


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def int_list(value: Any, url: str, path: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise AdapterError(url, path, "wrong shape: expected a list of token ids")
    return list(value)


def float_or_none(value: Any, url: str, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise AdapterError(url, path, f"wrong shape: expected a number, got {type(value).__name__}")
    try:
        return float(value)
    except ValueError:
        raise AdapterError(url, path, f"wrong shape: expected a number, got {value!r}") from None
