"""The e2e sweeps by name, and each one's outcome on a target computed once per session.

What each sweep sends lives with its family: :mod:`.concurrency_sweeps` (single, mixed, seeded),
:mod:`.neighbour_sweeps` (needle, logprobs), :mod:`.prefix_sweeps` (prefix, cache) and
:mod:`.prefill_decode_sweep`, and run to run :mod:`.replay`; the prompts in :mod:`.prompts`, the :class:`Outcome` in
:mod:`.outcome`. Verdicts and records are :mod:`pytest_invariance.e2e.checks`'s job.

Every sweep starts from an empty prefix cache where the server can empty it (evidence
``cache_flushed``): on a server with prefix caching, the first request of a sweep is otherwise cold
or warm by what the server served before, and where a cache hit changes the bits (measured on vLLM
CPU 0.32: a fresh server's single and prefix sweeps divergent, the same sweeps again vacuous) a
verdict would depend on the server's history rather than on the sweep.
"""

from __future__ import annotations

from .concurrency_sweeps import levels, seeded_sweep, sweep_mixed, sweep_single
from .neighbour_sweeps import sweep_logprobs, sweep_needle
from .outcome import Batch, Outcome, Sweep
from .prefill_decode_sweep import sweep_prefill_decode
from .prefix_sweeps import prefix_lengths, sweep_cache, sweep_prefix
from .prompts import MIXED_LENGTHS, PROBE, gen, neighbour, other, probe, seeded_prompt
from .replay import sweep_replay
from .target import Target

SWEEPS: dict[str, tuple[Sweep, str]] = {
    "single": (sweep_single, "unique-samples"),
    "needle": (sweep_needle, "unique-samples"),
    "mixed": (sweep_mixed, "unique-samples"),
    "prefix": (sweep_prefix, "unique-samples"),
    "logprobs": (sweep_logprobs, "batch-size"),
    "prefill-decode": (sweep_prefill_decode, "prefill-decode"),
    "cache": (sweep_cache, "cache"),
    "replay": (sweep_replay, "run-to-run"),
}


def run_cached(t: Target, name: str, profile: str, seed: int) -> Outcome:
    """A sweep's outcome on ``t``, computed once per session (the control is shared by the paired
    invariance test and the inverse test). Keyed by the target's URL: when the target and the
    control are the same server, both roles read one sweep rather than two timing-dependent ones."""
    key = (t.url, name, profile, seed, t.options)
    if key not in _OUTCOMES:
        flushed = t.adapter.flush_cache()  # see the module doc: a sweep starts from an empty prefix cache
        out = SWEEPS[name][0](t, profile, seed)
        out.evidence.setdefault("cache_flushed", flushed)
        _OUTCOMES[key] = _evidence_named(t, out)
    return _OUTCOMES[key]


def _evidence_named(t: Target, out: Outcome) -> Outcome:
    """The summary says which evidence the verdict rests on, so a pass on text alone reads as one."""
    out.summary += f" [compared: {t.options.compared}]"
    out.evidence.setdefault("compared", t.options.compared)
    return out


_OUTCOMES: dict[tuple, Outcome] = {}


__all__ = ["MIXED_LENGTHS", "PROBE", "SWEEPS", "Batch", "Outcome", "Sweep", "gen", "levels", "neighbour", "other",
           "prefix_lengths", "probe", "run_cached", "seeded_prompt", "seeded_sweep", "sweep_cache", "sweep_logprobs",
           "sweep_mixed", "sweep_needle", "sweep_prefill_decode", "sweep_prefix", "sweep_replay", "sweep_single"]  # fmt: skip
