"""The e2e sweeps: what to send to a target, and what came back, as an :class:`Outcome`.

The comparisons live in ``oracles.sequences``; a sweep only drives requests and assembles the
evidence. Verdicts and records are :mod:`pytest_invariance.e2e.checks`'s job.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_invariance.adapters import AdapterError, Completion, GenParams, Progress
from pytest_invariance.adapters.base import INDEPENDENT, Prompt
from pytest_invariance.oracles import sequences as S
from pytest_invariance.oracles.sweeps import probe_positions

from .target import COMPARED, JITTER_MS, Target, co_batching, dispatch_shape, send

PROBE = "The quick brown fox"
# Neighbour texts of very different lengths (characters ~ tokens for byte-level tokenizers).
_WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma "
          "tau upsilon phi chi psi omega").split()  # fmt: skip
MIXED_LENGTHS = (6, 300, 24, 160, 48, 220, 12, 96, 4, 260, 36, 128, 18, 200, 64, 8)


def neighbour(i: int, length: int) -> str:
    """A distinct, seeded prompt of roughly ``length`` characters."""
    rng = random.Random(1000 + i)
    words: list[str] = [f"[{i}]"]
    while sum(len(w) + 1 for w in words) < length:
        words.append(rng.choice(_WORDS))
    return " ".join(words)[: max(length, 3)]


def seeded_prompt(i: int, length: int, kind: str) -> list[int] | str:
    """A distinct, seeded prompt of ``length`` tokens: ids in 32..126 (printable bytes, valid in any
    byte-level vocabulary), or ``length`` words (about one token each for a BPE that learned them)."""
    rng = random.Random(7000 + i)
    if kind == "ids":
        return [rng.randrange(32, 127) for _ in range(length)]
    return " ".join([f"[{i}]"] + [rng.choice(_WORDS) for _ in range(max(length - 1, 0))])


def probe(t: Target) -> Prompt:
    """The probe request's prompt: the short text, or ``probe_tokens`` long (``--invariance-probe-tokens``)."""
    o = t.options
    return PROBE if o.probe_tokens is None else seeded_prompt(0, o.probe_tokens, o.prompts)


def other(t: Target, i: int, default_length: int) -> Prompt:
    """Neighbour ``i``: built-in text of ``default_length`` characters with the short probe, else a
    seeded prompt of the kind the probe is (a list request carries all ids or all text), its length
    from ``--invariance-neighbour-tokens`` (cycled) or ``default_length`` tokens."""
    o = t.options
    if o.probe_tokens is None and o.neighbour_tokens is None:
        return neighbour(i, default_length)
    length = o.neighbour_tokens[i % len(o.neighbour_tokens)] if o.neighbour_tokens else default_length
    return seeded_prompt(i + 1, length, o.prompts)


def gen(t: Target, max_tokens: int, logprobs: int = 2) -> GenParams:
    """Greedy parameters; logprobs only where the session compares them (``evidence``)."""
    return GenParams(max_tokens=max_tokens, logprobs=logprobs if t.options.logprobs else None)


def _described(p: Prompt) -> str | int:
    return p if isinstance(p, str) and len(p) <= 40 else (f"{len(p)} tokens" if isinstance(p, list) else f"{len(p)} chars")


@dataclass
class Batch:
    """One batch as sent and answered, in request order: what a replay of its steps needs."""

    prompts: list[list[int] | None]  # prompt token ids as the server reported them
    tokens: list[list[int]]
    logprobs: list[list[float | None] | None]
    probe_slots: list[int]  # which requests are the probe

    @classmethod
    def of(cls, cs: list[Completion], probe_slots: list[int]) -> Batch:
        return cls([c.prompt_token_ids for c in cs], [c.token_ids for c in cs], [c.logprobs for c in cs], probe_slots)


@dataclass
class Outcome:
    """What one sweep on one target observed."""

    diverged: bool | None
    evidence: dict
    summary: str
    shape: dict
    error: str | None = None
    unsupported: str | None = None
    blind: str | None = None  # why equality here could not count as a pass (e.g. cache hit not proven)
    batches: list[Batch] = field(default_factory=list)  # the probe alone first, then the batches it shared
    localization: dict | None = None  # e2e.localization's replay, computed once per outcome


def decode_len(profile: str, quick: int = 48) -> int:
    """Greedy tokens per request: longer in ``full``, where a late near-tie still gets its chance
    (a Llama-3-8B-sized model on the H200 forked at token 31 and 74 in the engine benchmark)."""
    return quick if profile == "quick" else 96


def levels(profile: str, t: Target | None = None) -> list[int]:
    """Concurrencies of the single sweep: the target's ``--invariance-levels``, else by profile."""
    if t is not None and t.options.levels:
        return sorted(set(t.options.levels))
    return [1, 2, 4, 8, 16] if profile == "quick" else [1, 2, 4, 8, 16, 32, 64, 128]


def _progress(label: str, total: int) -> Progress:
    return Progress(total, label)


Sweep = Callable[[Target, str, int], Outcome]


def _sequence_outcome(
    outputs: dict[int, list[list[int]]],
    ref_top: Any,
    shape: dict,
    extra: dict | None = None,
    logprobs: dict[int, list[Any]] | None = None,
) -> Outcome:
    """Unique samples by token ids, and under the bitwise contract also by logprob bits: two
    completions with equal tokens but different logprob bits came from different arithmetic."""
    an = S.analyze(outputs, reference=outputs[min(outputs)][0], reference_top=ref_top)
    ev = {**an.evidence(), **(extra or {})}
    diverged, text = an.diverged, an.describe()
    if logprobs is not None:
        low = min(outputs)
        ref_ids, ref_lps = outputs[low][0], logprobs[low][0]
        diffs = [
            {"concurrency": n, **d}
            for n in sorted(outputs)
            for ids, lps in zip(outputs[n], logprobs[n], strict=True)
            if (d := S.step_difference(ref_ids, ref_lps, ids, lps)) is not None
        ]
        ev["bitwise_differing_samples"] = len(diffs)
        ev["first_bitwise_difference"] = diffs[0] if diffs else None
        if diffs and not an.diverged:
            diverged = True
            d = diffs[0]
            text += (f"; token ids equal but logprob bits differ in {len(diffs)} sample(s), "
                     f"first at concurrency {d['concurrency']}, step {d['step']}")  # fmt: skip
    if ev.get("max_step_batch"):
        # so that an equal (possibly vacuous) result says whether the requests ever shared a step
        text += f"; largest engine step per level {ev['max_step_batch']}"
    return Outcome(diverged, ev, text, shape)


def _partial(outputs: dict[int, list[list[int]]], shape: dict, exc: AdapterError) -> Outcome:
    ev: dict = {"error": str(exc), "url": exc.url, "field": exc.field}
    if outputs:
        ev.update(S.analyze(outputs).evidence())
    return Outcome(None, ev, f"incomplete: {exc}", shape, error=str(exc))


def sweep_single(t: Target, profile: str, seed: int) -> Outcome:
    """One prompt at concurrency 1..N: N identical greedy requests with staggered arrivals."""
    lv = levels(profile, t)
    params, p = gen(t, decode_len(profile)), probe(t)
    shape = {"sweep": "single", "prompt": _described(p), "max_tokens": params.max_tokens, "levels": lv,
             **dispatch_shape(t)}  # fmt: skip
    outputs: dict[int, list[list[int]]] = {}
    lps: dict[int, list[Any]] = {}
    batches: dict[str, dict[int, int]] = {}
    seen: list[Batch] = []
    ref_top = None
    bar = _progress(f"single {t.engine}[{t.mode}]", sum(lv))
    try:
        for n in lv:
            cs = send(t, [p] * n, params, seed * 1000 + n, bar, batches)
            outputs[n] = [c.token_ids for c in cs]
            lps[n] = [c.logprobs for c in cs]
            seen.append(Batch.of(cs, list(range(n))))
            if ref_top is None:
                ref_top = cs[0].top_logprobs
    except AdapterError as exc:
        return _partial(outputs, shape, exc)
    return _seen(_sequence_outcome(outputs, ref_top, shape, co_batching(batches), logprobs=_lps(t, lps)), seen)


def _seen(out: Outcome, batches: list[Batch]) -> Outcome:
    out.batches = batches
    return out


def _lps(t: Target, lps: dict[int, list[Any]]) -> dict[int, list[Any]] | None:
    return lps if t.options.logprobs else None


def sweep_needle(t: Target, profile: str, seed: int) -> Outcome:
    """The probe at each position {0, 1, mid, N-2, N-1} among N-1 distinct neighbours."""
    n = 8 if profile == "quick" else 32
    params, p = gen(t, decode_len(profile)), probe(t)
    shape = {"sweep": "needle", "prompt": _described(p), "max_tokens": params.max_tokens, "batch": n,
             **dispatch_shape(t)}  # fmt: skip
    others = [other(t, i, MIXED_LENGTHS[i % len(MIXED_LENGTHS)] // 2 + 8) for i in range(n - 1)]
    positions = probe_positions(n)
    outputs: dict[int, list[list[int]]] = {}
    per_pos: dict[str, list[int]] = {}
    batches: dict[str, dict[int, int]] = {}
    bar = _progress(f"needle {t.engine}[{t.mode}]", 1 + n * len(positions))
    try:
        alone = t.adapter.generate([p], params, progress=bar)[0]
        seen = [Batch.of([alone], [0])]
        outputs[1] = [alone.token_ids]
        outputs[n] = []
        lps: dict[int, list[Any]] = {1: [alone.logprobs], n: []}
        for pos in positions:
            batch = others[:pos] + [p] + others[pos:]
            cs = send(t, batch, params, seed * 1000 + pos, bar, batches, f"position {pos}")
            seen.append(Batch.of(cs, [pos]))
            outputs[n].append(cs[pos].token_ids)
            lps[n].append(cs[pos].logprobs)
            per_pos[str(pos)] = cs[pos].token_ids
    except AdapterError as exc:
        return _partial(outputs, shape, exc)
    differing = [int(p) for p, ids in per_pos.items() if ids != alone.token_ids]
    return _seen(_sequence_outcome(outputs, alone.top_logprobs, shape,
                                   {"positions": positions, "differing_positions": differing, **co_batching(batches)},
                                   logprobs=_lps(t, lps)), seen)  # fmt: skip


def sweep_mixed(t: Target, profile: str, seed: int) -> Outcome:
    """Neighbours of very different lengths, so prefill chunks and decodes share steps."""
    lv = sorted(set(t.options.levels)) if t.options.levels else [1, 4, 8, 16] if profile == "quick" else [1, 4, 8, 16, 32, 64]
    params, p = gen(t, decode_len(profile)), probe(t)
    shape = {"sweep": "mixed", "prompt": _described(p), "max_tokens": params.max_tokens, "levels": lv,
             "neighbour_lengths": list(t.options.neighbour_tokens or MIXED_LENGTHS), **dispatch_shape(t)}  # fmt: skip
    outputs: dict[int, list[list[int]]] = {}
    lps: dict[int, list[Any]] = {}
    batches: dict[str, dict[int, int]] = {}
    seen: list[Batch] = []
    ref_top = None
    bar = _progress(f"mixed {t.engine}[{t.mode}]", sum(lv))
    try:
        for n in lv:
            batch = [other(t, i, MIXED_LENGTHS[i % len(MIXED_LENGTHS)]) for i in range(n)]
            slots = sorted({0, n // 2})
            for s in slots:
                batch[s] = p
            cs = send(t, batch, params, seed * 1000 + n, bar, batches)
            seen.append(Batch.of(cs, slots))
            outputs[n] = [cs[s].token_ids for s in slots]
            lps[n] = [cs[s].logprobs for s in slots]
            if ref_top is None:
                ref_top = cs[0].top_logprobs
    except AdapterError as exc:
        return _partial(outputs, shape, exc)
    return _seen(_sequence_outcome(outputs, ref_top, shape, co_batching(batches), logprobs=_lps(t, lps)), seen)


def prefix_lengths(info: dict | None) -> list[int]:
    """Shared-prefix lengths (tokens) at page/block and prefill-chunk boundaries, +-1."""
    info = info or {}
    page = int(info.get("page_size") or info.get("block_size") or 16)
    chunk = int(info.get("chunked_prefill_size") or info.get("chunk_size") or 256)
    chunk = min(chunk, 1024)  # a real server's 8192-token chunk is out of reach of a quick sweep
    return sorted({n for b in (page, chunk) for n in (b - 1, b, b + 1) if n >= 1})


def _shared_prefix(t: Target, rng: random.Random, length: int, n: int) -> list[Prompt]:
    """``n`` prompts sharing a ``length``-token prefix, then 6 tokens each of their own: token ids,
    or words where the server takes text only (``length`` words, about as many tokens)."""
    if t.options.prompts == "ids":
        prefix = [rng.randrange(32, 127) for _ in range(length)]
        return [prefix + [rng.randrange(32, 127) for _ in range(6)] for _ in range(n)]
    head = " ".join(rng.choice(_WORDS) for _ in range(length))
    return [head + " " + " ".join(rng.choice(_WORDS) for _ in range(6)) for _ in range(n)]


def _needs_logprobs(t: Target, shape: dict) -> Outcome | None:
    """``unsupported`` for a sweep that compares logprob bits when the session compares tokens/text."""
    if t.options.logprobs:
        return None
    why = f"this sweep compares logprobs; the session compares {t.options.compared} only (--invariance-evidence)"
    return Outcome(None, {}, why, shape, unsupported=why)


def sweep_prefix(t: Target, profile: str, seed: int) -> Outcome:
    """Requests sharing a prefix whose length sits at a page/chunk boundary +-1: the probe alone vs
    the probe concurrent with requests that share its prefix, token ids and logprob bits per step."""
    n = 4 if profile == "quick" else 16
    params = gen(t, 16)
    lengths = list(t.options.prefix_lengths or prefix_lengths(t.info))
    shape = {"sweep": "prefix", "prefix_lengths": lengths, "batch": n, "max_tokens": params.max_tokens,
             **dispatch_shape(t)}  # fmt: skip
    rng = random.Random(seed)
    per_length: dict[str, Any] = {}
    bad: list[int] = []
    first: dict[str, Any] = {}
    bar = _progress(f"prefix {t.engine}[{t.mode}]", len(lengths) * (1 + n))
    try:
        for length in lengths:
            prompts = _shared_prefix(t, rng, length, n)
            alone = t.adapter.generate([prompts[0]], params, progress=bar)[0]
            cs = send(t, prompts, params, seed * 1000 + length, bar)
            d = S.step_difference(alone.token_ids, alone.logprobs, cs[0].token_ids, cs[0].logprobs)
            per_length[str(length)] = d
            if d is not None:
                bad.append(length)
                if not first:
                    first = {
                        "batch_size": n,
                        "token_index": d["step"],
                        "label": f"prefix {length}: {d['what']}",
                    }
    except AdapterError as exc:
        return Outcome(
            None,
            {"error": str(exc), "prefix_lengths": per_length},
            f"incomplete: {exc}",
            shape,
            error=str(exc),
        )
    unique = 2 if bad else 1
    ev = {"samples": 2 * len(per_length), "unique": unique, "concurrency": [1, n],
          "points": [{"concurrency": 1, "unique": 1}, {"concurrency": n, "unique": unique}],
          "prefix_lengths": per_length, "differing_prefix_lengths": bad, "first": first}  # fmt: skip
    text = f"{len(lengths)} prefix lengths {lengths}, alone vs {n} sharing: " + (
        f"differ at {bad} (first: {first['label']} at step {first['token_index']})"
        if bad
        else "bitwise equal"
    )
    return Outcome(bool(bad), ev, text, shape)


def sweep_logprobs(t: Target, profile: str, seed: int) -> Outcome:
    """Batch 1 vs batch N: token ids and logprob bits at every step."""
    n = 8 if profile == "quick" else 32
    params, p = GenParams(max_tokens=decode_len(profile), logprobs=2), probe(t)
    shape = {"sweep": "logprobs", "prompt": _described(p), "batch": n, "max_tokens": params.max_tokens,
             **dispatch_shape(t)}  # fmt: skip
    if (skip := _needs_logprobs(t, shape)) is not None:
        return skip
    batches: dict[str, dict[int, int]] = {}
    try:
        bar = _progress(f"logprobs {t.engine}[{t.mode}]", 1 + n)
        alone = t.adapter.generate([p], params, progress=bar)[0]
        batch = [other(t, i, MIXED_LENGTHS[i % len(MIXED_LENGTHS)]) for i in range(n)]
        batch[n // 2] = p
        cs = send(t, batch, params, seed, bar, batches)
    except AdapterError as exc:
        return Outcome(None, {"error": str(exc)}, f"incomplete: {exc}", shape, error=str(exc))
    got = cs[n // 2]
    if alone.logprobs is None or got.logprobs is None:
        return Outcome(
            None, {}, "no per-token logprobs returned", shape, unsupported="the server returned no logprobs"
        )
    diff = S.step_difference(alone.token_ids, alone.logprobs, got.token_ids, got.logprobs)
    steps = min(len(alone.token_ids), len(got.token_ids))
    ev = {"samples": 2, "unique": 1 if diff is None else 2, "concurrency": [1, n], "steps": steps,
          "first_step_difference": diff,
          "max_abs_logprob_diff": S.logprob_max_abs_diff(alone.logprobs, got.logprobs),
          "first": {"batch_size": n, "token_index": diff["step"], "label": f"{diff['what']} at step {diff['step']}"} if diff else {},
          **co_batching(batches)}  # fmt: skip
    if diff and diff["what"] == "token" and alone.top_logprobs:
        m = S.top_margin(alone.top_logprobs[diff["step"]])
        ev["first"].update(margin=m, margin_class=S.classify_margin(m))
    text = f"batch 1 vs {n}: " + ("token ids and logprob bits equal at all "
                                   f"{steps} steps" if diff is None else f"first {diff['what']} difference at step {diff['step']}")  # fmt: skip
    return Outcome(diff is not None, ev, text, shape, batches=[Batch.of([alone], [0]), Batch.of(cs, [n // 2])])


def sweep_prefill_decode(t: Target, profile: str, seed: int) -> Outcome:
    """Each decoded token's logprob vs the prefill rescoring of prompt + generated tokens, bitwise."""
    prompts = (
        [probe(t), other(t, 3, 40)]
        if profile == "quick"
        else [probe(t)] + [other(t, i, 40 + 20 * i) for i in range(4)]
    )
    params = GenParams(max_tokens=16, logprobs=0)
    shape = {"sweep": "prefill-decode", "prompts": len(prompts), "max_tokens": params.max_tokens}
    if (skip := _needs_logprobs(t, shape)) is not None:
        return skip
    diffs, max_abs, compared = [], 0.0, 0
    try:
        for p in prompts:
            gen = t.adapter.generate([p], params)[0]
            if gen.prompt_token_ids is None or gen.logprobs is None:
                return Outcome(None, {}, "prompt token ids or logprobs not returned", shape,
                               unsupported="the server returned no prompt token ids or no logprobs")  # fmt: skip
            full = gen.prompt_token_ids + gen.token_ids
            rescore = t.adapter.generate([full], GenParams(max_tokens=1, prompt_logprobs=0))[0]
            if rescore.prompt_logprobs is None:
                return Outcome(
                    None,
                    {},
                    "no prompt logprobs",
                    shape,
                    unsupported="the server returned no prompt logprobs",
                )
            k = len(gen.prompt_token_ids)
            pre = rescore.prompt_logprobs[k : k + len(gen.token_ids)]
            d = S.step_difference(gen.token_ids, gen.logprobs, gen.token_ids, pre)
            compared += len(pre)
            max_abs = max(max_abs, S.logprob_max_abs_diff(gen.logprobs, pre))
            if d is not None:
                diffs.append({"prompt": p if isinstance(p, str) else len(p), **d})
    except AdapterError as exc:
        return Outcome(None, {"error": str(exc)}, f"incomplete: {exc}", shape, error=str(exc))
    ev = {"samples": compared, "unique": 2 if diffs else 1, "differences": diffs, "max_abs_logprob_diff": max_abs,
          "first": {"token_index": diffs[0]["step"], "label": "decode vs prefill"} if diffs else {}}  # fmt: skip
    text = (f"{compared} decoded logprobs vs prefill rescoring: "
            + (f"{len(diffs)} prompt(s) differ, first at step {diffs[0]['step']}, max |diff| {max_abs:.3g}" if diffs else "bitwise equal"))  # fmt: skip
    return Outcome(bool(diffs), ev, text, shape)


def sweep_cache(t: Target, profile: str, seed: int) -> Outcome:
    """The same request cold and warm; the warm one must hit the prefix cache, the cold one not.

    A fresh random nonce starts the prompt on every run, so the "cold" request is cold without a
    flush, even on a server that cannot flush and has served this sweep before. Where the server
    reports cached tokens (OpenAI ``usage.prompt_tokens_details.cached_tokens``, SGLang
    ``meta_info.cached_tokens``), the evidence must show cold = 0 and warm > 0; where it does not,
    the hit is not proven and equality is ``vacuous``, never a clean pass."""
    nonce = f"<{secrets.token_hex(6)}> "
    # at least a few KV blocks long: vLLM caches only whole blocks (128 tokens on its CPU build)
    block = int((t.info or {}).get("block_size") or (t.info or {}).get("page_size") or 16)
    prompt = nonce + neighbour(7, max(160, 8 * block))
    params = gen(t, 16, logprobs=0)
    shape = {"sweep": "cache", "prompt_chars": len(prompt), "max_tokens": params.max_tokens,
             "compared": t.options.compared}  # fmt: skip
    try:
        flushed = t.adapter.flush_cache()
        cold = t.adapter.generate([prompt], params)[0]
        warm = t.adapter.generate([prompt], params)[0]
    except AdapterError as exc:
        return Outcome(None, {"error": str(exc)}, f"incomplete: {exc}", shape, error=str(exc))
    hit = warm.cached_tokens
    ev: dict[str, Any] = {"samples": 2, "nonce": nonce.strip(), "flushed": flushed,
                          "cold_cached_tokens": cold.cached_tokens, "warm_cached_tokens": hit}  # fmt: skip
    if hit is not None and hit == 0:
        return Outcome(None, ev, "the warm request did not hit the prefix cache", shape,
                       unsupported="prefix cache off: the warm request reported 0 cached tokens")  # fmt: skip
    blind = None
    if hit is None:
        blind = "cache hit not proven: the server reports no cached tokens"
    elif cold.cached_tokens:
        blind = f"the cold request was served {cold.cached_tokens} tokens from the cache"
    ev["cache_hit"] = "not proven" if blind else "proven (cold 0, warm > 0)"
    diff = S.step_difference(cold.token_ids, cold.logprobs, warm.token_ids, warm.logprobs)
    ev.update(
        unique=1 if diff is None else 2,
        first_step_difference=diff,
        first={"token_index": diff["step"], "label": f"warm {diff['what']}"} if diff else {},
    )
    proof = blind or f"cold 0, warm hit {hit} cached tokens"
    text = f"cold vs warm ({proof}): " + (
        "bitwise equal" if diff is None else f"first {diff['what']} difference at step {diff['step']}"
    )
    return Outcome(diff is not None, ev, text, shape, blind=blind)


SWEEPS: dict[str, tuple[Sweep, str]] = {
    "single": (sweep_single, "unique-samples"),
    "needle": (sweep_needle, "unique-samples"),
    "mixed": (sweep_mixed, "unique-samples"),
    "prefix": (sweep_prefix, "unique-samples"),
    "logprobs": (sweep_logprobs, "batch-size"),
    "prefill-decode": (sweep_prefill_decode, "prefill-decode"),
    "cache": (sweep_cache, "cache"),
}


def run_cached(t: Target, name: str, profile: str, seed: int) -> Outcome:
    """A sweep's outcome on ``t``, computed once per session (the control is shared by the paired
    invariance test and the inverse test). Keyed by the target's URL: when the target and the
    control are the same server, both roles read one sweep rather than two timing-dependent ones."""
    key = (t.url, name, profile, seed, t.options)
    if key not in _OUTCOMES:
        _OUTCOMES[key] = _evidence_named(t, SWEEPS[name][0](t, profile, seed))
    return _OUTCOMES[key]


def _evidence_named(t: Target, out: Outcome) -> Outcome:
    """The summary says which evidence the verdict rests on, so a pass on text alone reads as one."""
    out.summary += f" [compared: {t.options.compared}]"
    out.evidence.setdefault("compared", t.options.compared)
    return out


_OUTCOMES: dict[tuple, Outcome] = {}


def seeded_sweep(t: Target, profile: str, seed: int) -> tuple[Outcome, list]:
    """The probe sampled with one seed at each concurrency, then four requests with seeds 1..4."""
    lv = [1, 4, 8] if profile == "quick" else [1, 4, 8, 16, 32]
    params, p = GenParams(max_tokens=16, temperature=1.0, seed=1234), probe(t)
    shape = {"sweep": "seeded-sampling", "prompt": _described(p), "temperature": 1.0, "seed": 1234, "levels": lv,
             "max_tokens": params.max_tokens, **dispatch_shape(t),
             "seeds_control_dispatch": INDEPENDENT}  # fmt: skip
    outputs: dict[int, list[list[int]]] = {}
    bar = _progress(f"seeded {t.engine}[{t.mode}]", sum(lv) + 4)
    others: list = []
    try:
        for n in lv:
            cs = send(t, [p] * n, params, seed * 1000 + n, bar)
            outputs[n] = [c.token_ids for c in cs]
        # Four different seeds cannot share one list request (one set of sampling parameters each).
        seeds = [GenParams(max_tokens=16, temperature=1.0, seed=s) for s in (1, 2, 3, 4)]
        others = t.adapter.generate(
            [p] * 4, seeds, jitter_ms=JITTER_MS, seed=seed, progress=bar
        )
        out = _sequence_outcome(outputs, None, shape)
        out.summary += f" [compared: {COMPARED['text' if t.options.evidence == 'text' else 'tokens']}]"
        return out, others
    except AdapterError as exc:
        return _partial(outputs, shape, exc), others
