"""Server metrics in Prometheus text format.

The point is evidence, not dashboards: a differential sweep must be able to prove that its
concurrent requests really shared engine steps (a batch-size histogram and its maximum), and that
nothing was lost under load (request counters by outcome). Updated from the engine thread and the
event loop, so every update takes a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
PREFIX = "invariance_engine"


class Metrics:
    """Counters, gauges and one histogram, rendered by :meth:`render`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.steps = 0
        self.batch_bucket_counts = [0] * len(BATCH_BUCKETS)
        self.batch_sum = 0
        self.batch_last = 0
        self.batch_max = 0
        self.steps_by_batch: dict[int, int] = {}  # exact sizes: a sweep diffs them around each level
        self.step_tokens_last = 0
        self.num_prefill_last = 0
        self.num_decode_last = 0
        self.engine_waiting = 0
        self.queue_depth = 0
        self.inflight = 0
        self.requests: dict[str, int] = {}
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.kv_free = self.kv_total = 0

    def observe_step(self, stats: Mapping[str, int], generated: int) -> None:
        """Record one engine step (``LLMEngine.last_step_stats``) and its generated tokens."""
        bs = int(stats.get("batch_size", 0))
        with self._lock:
            self.steps += 1
            self.batch_sum += bs
            self.batch_last = bs
            self.batch_max = max(self.batch_max, bs)
            self.steps_by_batch[bs] = self.steps_by_batch.get(bs, 0) + 1
            for i, edge in enumerate(BATCH_BUCKETS):
                if bs <= edge:
                    self.batch_bucket_counts[i] += 1
            self.step_tokens_last = int(stats.get("num_tokens", 0))
            self.num_prefill_last = int(stats.get("num_prefill", 0))
            self.num_decode_last = int(stats.get("num_decode", 0))
            self.engine_waiting = int(stats.get("waiting", 0))
            self.generation_tokens += generated

    def count_request(self, outcome: str, prompt_tokens: int = 0) -> None:
        """Count one request by outcome (``accepted``, ``finished``, ``rejected_overload`` ...)."""
        with self._lock:
            self.requests[outcome] = self.requests.get(outcome, 0) + 1
            self.prompt_tokens += prompt_tokens

    def set_kv(self, free: int, total: int) -> None:
        """KV-cache blocks free and in all, after the latest engine step (a stream dropped mid-way
        must give its blocks back: this is where that shows)."""
        with self._lock:
            self.kv_free, self.kv_total = free, total

    def set_load(self, inflight: int, queue_depth: int) -> None:
        """Sequences admitted and not finished, and how many of those exceed the running limit."""
        with self._lock:
            self.inflight = inflight
            self.queue_depth = queue_depth

    def snapshot(self) -> dict[str, object]:
        """The numbers as a dict (for ``/server_info`` and tests)."""
        with self._lock:
            return {
                "steps": self.steps,
                "batch_size_last": self.batch_last,
                "batch_size_max": self.batch_max,
                "batch_size_sum": self.batch_sum,
                "queue_depth": self.queue_depth,
                "engine_waiting": self.engine_waiting,
                "inflight": self.inflight,
                "requests": dict(self.requests),
                "prompt_tokens": self.prompt_tokens,
                "generation_tokens": self.generation_tokens,
                "kv_blocks_free": self.kv_free,
                "kv_blocks_used": self.kv_total - self.kv_free,
                "kv_blocks_total": self.kv_total,
            }

    def render(self) -> str:
        """Prometheus text exposition format (version 0.0.4)."""
        with self._lock:
            p = PREFIX
            lines = [
                f"# HELP {p}_batch_size Sequences per engine step.",
                f"# TYPE {p}_batch_size histogram",
            ]
            for edge, count in zip(BATCH_BUCKETS, self.batch_bucket_counts, strict=True):
                lines.append(f'{p}_batch_size_bucket{{le="{edge}"}} {count}')
            lines += [
                f'{p}_batch_size_bucket{{le="+Inf"}} {self.steps}',
                f"{p}_batch_size_sum {self.batch_sum}",
                f"{p}_batch_size_count {self.steps}",
            ]
            gauges = [
                ("batch_size_last", "Sequences in the most recent engine step.", self.batch_last),
                ("batch_size_max", "Largest number of sequences in one engine step.", self.batch_max),
                (
                    "step_tokens_last",
                    "Tokens computed in the most recent engine step.",
                    self.step_tokens_last,
                ),
                ("step_prefill_last", "Prefill sequences in the most recent step.", self.num_prefill_last),
                ("step_decode_last", "Decode sequences in the most recent step.", self.num_decode_last),
                (
                    "engine_waiting",
                    "Sequences waiting in the engine scheduler after the last step.",
                    self.engine_waiting,
                ),
                (
                    "queue_depth",
                    "Admitted sequences beyond the running limit (the bounded queue).",
                    self.queue_depth,
                ),
                ("inflight", "Admitted sequences not yet finished.", self.inflight),
                ("kv_blocks_free", "KV-cache blocks free after the last engine step.", self.kv_free),
                ("kv_blocks_used", "KV-cache blocks held after the last engine step.", self.kv_total - self.kv_free),
                ("kv_blocks_total", "KV-cache blocks in all.", self.kv_total),
            ]
            for name, help_, value in gauges:
                lines += [f"# HELP {p}_{name} {help_}", f"# TYPE {p}_{name} gauge", f"{p}_{name} {value}"]
            counters = [
                ("steps_total", "Engine steps run.", self.steps),
                ("prompt_tokens_total", "Prompt tokens of accepted sequences.", self.prompt_tokens),
                ("generation_tokens_total", "Tokens generated.", self.generation_tokens),
            ]
            for name, help_, value in counters:
                lines += [f"# HELP {p}_{name} {help_}", f"# TYPE {p}_{name} counter", f"{p}_{name} {value}"]
            lines += [f"# HELP {p}_steps_by_batch_size_total Engine steps by exact number of sequences.",
                      f"# TYPE {p}_steps_by_batch_size_total counter"]  # fmt: skip
            for bs in sorted(self.steps_by_batch):
                lines.append(f'{p}_steps_by_batch_size_total{{batch_size="{bs}"}} {self.steps_by_batch[bs]}')
            lines += [f"# HELP {p}_requests_total Requests by outcome.", f"# TYPE {p}_requests_total counter"]
            for outcome in sorted(self.requests):
                lines.append(f'{p}_requests_total{{outcome="{outcome}"}} {self.requests[outcome]}')
            return "\n".join(lines) + "\n"
