"""The fakes' HTTP front: OpenAI completions and chat, SGLang's ``/generate``, and the side routes
through which a real engine reports its configuration (its capture ladder among it)."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from typing import Any

from .protocol import MODEL_NAME, BadRequest, sampling
from .routes import handler
from .scheduler import FakeConfig, Row, Scheduler

LADDER_STYLES = ("none", "bundled", "vllm", "sglang")


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # a replay opens dozens of connections at once; the default backlog is 5
    daemon_threads = True


class FakeEngine:
    """A planted-bug engine on a free loopback port, served from a thread (see the package docs)."""

    def __init__(self, bug: str = "none", *, report_ladder: str = "vllm", host: str = "127.0.0.1",
                 port: int = 0, **knobs: Any) -> None:  # fmt: skip
        if report_ladder not in LADDER_STYLES:
            raise ValueError(f"report_ladder must be one of {', '.join(LADDER_STYLES)}, got {report_ladder!r}")
        self.config = FakeConfig(bug=bug, **knobs)
        self.report_ladder = report_ladder
        self.scheduler: Scheduler | None = None
        self.requests = 0
        self._lock = threading.Lock()
        self.httpd = _Server((host, port), handler(self))
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fake-http", daemon=True)

    def start(self) -> FakeEngine:
        self.scheduler = Scheduler(self.config)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.scheduler is not None:
            self.scheduler.stop()

    def __enter__(self) -> FakeEngine:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stats(self) -> dict[str, Any]:
        s = self.scheduler
        return {"requests": self.requests, "perturbed_rows": s.perturbed_rows if s else 0,
                "steps_by_batch": dict(sorted(s.steps_by_batch.items())) if s else {}}  # fmt: skip

    # -- what it reports about itself -----------------------------------------------------------
    def server_info(self) -> dict[str, Any] | None:
        cfg, style = self.config, self.report_ladder
        ladder = list(cfg.ladder)
        common = {"model": MODEL_NAME, "dtype": "float32", "block_size": cfg.block_size,
                  "chunk_size": cfg.chunk_tokens, "max_num_seqs": cfg.max_num_seqs, "fake_bug": cfg.bug}  # fmt: skip
        if style == "bundled":
            return {"engine": "fake", "mode": "invariant", "cuda_graph_buckets": ladder, **common}
        if style == "sglang":
            return {"model_path": MODEL_NAME, "enable_deterministic_inference": True, "cuda_graph_bs": ladder,
                    "page_size": cfg.block_size, "chunked_prefill_size": cfg.chunk_tokens,
                    "disable_radix_cache": not cfg.prefix_cache, "max_running_requests": cfg.max_num_seqs,
                    "version": "fake"}  # fmt: skip
        if style == "vllm":
            return {"vllm_config": {
                "model_config": {"model": MODEL_NAME, "dtype": "torch.float32", "enforce_eager": False},
                "cache_config": {"block_size": cfg.block_size, "enable_prefix_caching": cfg.prefix_cache},
                "scheduler_config": {"max_num_batched_tokens": cfg.chunk_tokens, "max_num_seqs": cfg.max_num_seqs},
                "compilation_config": {"cudagraph_capture_sizes": ladder, "cudagraph_mode": 2}},
                "vllm_env": {"VLLM_BATCH_INVARIANT": "1"}}  # fmt: skip
        return None

    def metrics(self) -> str:
        steps = self.scheduler.steps_by_batch if self.scheduler else {}
        return "".join(f'invariance_engine_steps_by_batch_size_total{{batch_size="{n}"}} {c}\n'
                       for n, c in sorted(steps.items()))  # fmt: skip

    # -- generation -------------------------------------------------------------------------------
    def rows(self, prompts: list[list[int]], body: dict, n: int = 1, prompt_logprobs: bool = False) -> list[Row]:
        """The rows of one request (``n`` per prompt), handed to the step loop together."""
        assert self.scheduler is not None
        try:
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            temperature = float(body.get("temperature") if body.get("temperature") is not None else 1.0)
            top = int(body.get("logprobs") or 0) if not isinstance(body.get("logprobs"), bool) else int(body.get("top_logprobs") or 0)
        except (TypeError, ValueError):
            raise BadRequest("max_tokens, temperature and logprobs must be numbers") from None
        if not 1 <= max_tokens <= 4096:
            raise BadRequest("max_tokens must be in 1..4096")
        seed = body.get("seed")
        req = self.scheduler.new_request()
        with self._lock:
            self.requests += 1
        rows = [Row(req, p, max_tokens, temperature, seed if isinstance(seed, int) else None, max(top, 0),
                    sampling(body), prompt_logprobs, n=n, stream=bool(body.get("stream")))
                for p in prompts for _ in range(n)]  # fmt: skip
        self.scheduler.submit(rows)
        return rows


__all__ = ["LADDER_STYLES", "FakeEngine"]
