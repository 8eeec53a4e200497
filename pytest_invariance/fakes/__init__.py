"""Planted-bug OpenAI-compatible engines, for positive controls only.

Each fake serves real HTTP on a loopback port from a thread, so the e2e suites point at it by URL
exactly as at a user's server (``--invariance-url``). It computes real greedy tokens and logprobs
from a small seeded float32 model (:mod:`.model`; a byte vocabulary: text prompts are their UTF-8
bytes, token-id prompts are ids in 0..255) and plants exactly one named bug (:mod:`.scheduler`).

Stable API (extend, do not rename)::

    from pytest_invariance.fakes import FakeEngine, BUGS, LADDER_STYLES, NEIGHBOUR_TRIGGERS, SAMPLER_TRIGGERS
    with FakeEngine("padding", report_ladder="vllm") as fake:   # or FakeEngine(...).start() / .stop()
        fake.url          # http://127.0.0.1:PORT
        fake.stats()      # {"requests", "perturbed_rows", "steps_by_batch"}
        fake.config       # the FakeConfig (bug and knobs)

    python -m pytest_invariance.fakes --bug padding [--port 0] [--report-ladder vllm] ...
    # prints the URL on its first line, serves until killed (for a pytest in another process)

Bugs (``bug=``), each one explicit rule applied per engine step, to every row of the step:

- ``none``: the clean twin; batch-invariant and run-to-run deterministic by construction (every
  row is computed alone at one shape).
- ``padding``: a step of ``n`` rows where ``n`` is below the top of ``ladder`` but not on it is
  padded to its bucket (the next ladder size) and its rows change, by an amount that depends on
  the bucket; at ladder sizes (and above the ladder, eager) rows are clean, so identical copies at
  1, 2, 4, 8, 16, ... are bitwise equal. ``ladder`` defaults to vLLM's capture sizes.
- ``neighbour``: a row changes while another row in its step, with a different prompt (identical
  copies never trigger), has a property (``neighbour_trigger``): ``long-prompt`` (a prompt longer than ``chunk_tokens``, default 256),
  ``shared-prefix`` (a different prompt with the same first ``block_size`` tokens) or
  ``sampling`` (a request with temperature > 0, top_p < 1 or a penalty/top_k/min_p/logit_bias).
- ``replay``: in a step whose rows come from two or more requests, with chance ``replay_rate``
  (default 0.02, from an unseeded RNG) one random row changes: the same concurrent workload
  replayed gives different bits some of the time; a single list request never changes.
- ``warm-cache``: the prefix cache keeps states at half precision, so a cache hit (a prompt
  starting with a cached whole ``block_size`` block) resumes from other bits than a cold prefill.
- ``token-budget``: a step whose rows hold more than ``token_budget`` tokens in all (prompts and
  generated tokens of every row, default 2048) changes every row: split-KV / chunked attention
  chosen by the step's total tokens.
- ``large-batch``: a step of at least ``batch_threshold`` rows (default 48, no ladder edge)
  changes every row: a kernel switch above the sizes a short sweep visits.
- ``mixed-step``: a row that is decoding changes in a step where another row is in its prefill
  step (a request arriving while it decodes: decodes then run through the prefill kernel); a
  list request's rows prefill together, so alone they never mix.
- ``row-index``: the row at index ``i >= row_from`` of its step (admission order; default 1)
  changes, by an amount that grows with ``i``: rows past a tile reduce in another order.
- ``sampler-path``: a row changes while a row of another request in its step has the
  ``sampler_trigger``: ``top-logprobs`` (it asks for more top logprobs than this row),
  ``n`` (its request has ``n > 1``) or ``stream`` (its request is streamed).
- ``stale-slot``: a finished request's KV slot is freed without being cleared (``stale_after``
  ``finish``; ``abort``: only a slot freed by a client hanging up mid-stream keeps its contents),
  and a later row given that slot (lowest free first) changes while the old occupant left tokens
  beyond its own length in its current ``block_size`` block, by an amount set by what was left.
- ``long-context``: a row whose context (prompt and generated tokens) reaches ``split_kv_tokens``
  (default 1024) decodes with split KV, in ``8 // n`` pieces at a step of ``n`` rows (one piece,
  clean, from 8 rows on): long rows change with the batch size, short rows never.

Knobs (keywords of ``FakeEngine``; ``FakeConfig`` fields): ``ladder``, ``neighbour_trigger``,
``chunk_tokens``, ``block_size`` (16), ``replay_rate``, ``token_budget``, ``batch_threshold``,
``row_from``, ``sampler_trigger``, ``stale_after``, ``split_kv_tokens``, ``prefix_cache`` (True),
``step_s`` (0.002 s per engine step, so that concurrent requests overlap), ``max_num_seqs`` (256),
``seed`` (model weights). ``report_ladder``: how the fake describes itself, as ``none`` (a plain
OpenAI server: ``/v1/models`` only), ``bundled`` (``/server_info`` with ``mode`` and
``cuda_graph_buckets``), ``vllm`` (``/server_info`` with
``vllm_config.compilation_config.cudagraph_capture_sizes`` and ``VLLM_BATCH_INVARIANT=1``;
``/version``) or ``sglang`` (``/server_info`` with ``cuda_graph_bs`` and
``enable_deterministic_inference``). Every style claims invariance.

Routes: ``POST /v1/completions`` (``prompt`` as text, token ids or a list of either; ``max_tokens``,
``temperature``, ``seed``, ``n``, ``logprobs`` (legacy object, tokens named ``token_id:N``),
``echo`` (prompt logprobs in the legacy object), vLLM's ``prompt_logprobs``, ``stream`` (SSE, one
token per event, ``data: [DONE]``); every choice carries ``token_ids`` and ``prompt_token_ids``;
``usage.prompt_tokens_details.cached_tokens``), ``POST /v1/chat/completions`` (``messages``,
``logprobs``/``top_logprobs``, ``stream``), ``POST /generate`` (SGLang native), ``GET /v1/models``,
``/health``, ``/server_info``, ``/version``, ``/metrics`` (steps by batch size, the bundled
engine's metric), ``POST /flush_cache`` and ``/reset_prefix_cache``. Other OpenAI parameters are
accepted and ignored, except as the neighbour bug's ``sampling`` trigger.
"""

from __future__ import annotations

from .scheduler import BUGS, DEFAULT_LADDER, NEIGHBOUR_TRIGGERS, SAMPLER_TRIGGERS, STALE_AFTER, FakeConfig
from .server import LADDER_STYLES, FakeEngine

__all__ = ["BUGS", "DEFAULT_LADDER", "LADDER_STYLES", "NEIGHBOUR_TRIGGERS", "SAMPLER_TRIGGERS", "STALE_AFTER",  # fmt: skip
           "FakeConfig", "FakeEngine"]
