"""The `speculative` sweep and checks: the same greedy prompts on a plain and a speculative target.

Speculation changes how the target computes a token (k+1 positions verified in one pass, a
prefill-shaped chunk, instead of one decode), never what it should compute. So the comparison is
token ids and logprob bits per step, plain vs speculative, with the first divergence and the
plain side's top-1/top-2 margin at a token flip.

Two ways the sweep can be blind, both ``vacuous`` rather than a pass: the speculative target never
accepted a draft (then it ran plain decoding), or it does not report its acceptance counters
(``speculative_stats`` in ``/server_info``) so acceptance is not proven. The positive control is
the same pair in default mode, which must diverge somewhere in the sweep.
"""

from __future__ import annotations

from typing import Any

from pytest_invariance.adapters import AdapterError, GenParams
from pytest_invariance.judge import Control, Observation
from pytest_invariance.oracles import sequences as S
from pytest_invariance.oracles.vocabulary import SPECULATIVE

from .checks import _judge
from .sweeps import Outcome
from .target import Target, dispatch_shape, send

# Prompts whose continuations a prompt-lookup drafter can guess: repeated text, code with repeated
# structure, and a prompt that quotes itself. (The demo model's synthetic weights also fall into
# loops of their own output, which the drafter then finds too.)
SPEC_PROMPTS = (
    "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat sat on",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return",
    'He said: "to be or not to be". Again he said: "to be or not to be". Once more he said: "to be',
    "1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2,",
    "<li>item</li>\n<li>item</li>\n<li>item</li>\n<li>",
    "abc abc abc abc abc abc abc abc",
)


def spec_stats(t: Target) -> dict | None:
    """The target's cumulative speculative counters (the adapter knows where its engine reports
    them: the bundled engine's ``/server_info``, vLLM's ``/metrics``); None: not reported."""
    return t.adapter.speculative_stats()


def _acceptance(before: dict | None, after: dict | None) -> dict | None:
    if before is None or after is None:
        return None
    drafted = int(after.get("draft_tokens", 0)) - int(before.get("draft_tokens", 0))
    accepted = int(after.get("accepted_tokens", 0)) - int(before.get("accepted_tokens", 0))
    return {"draft_tokens": drafted, "accepted_tokens": accepted,
            "acceptance_rate": accepted / drafted if drafted else 0.0}  # fmt: skip


def _difference(plain: Any, spec: Any, prompt: str) -> dict | None:
    """The first step where ids or logprob bits differ, and the first token flip (which can come
    later) with the plain side's top-1/top-2 margin there: a near-tie flip is what a changed
    reduction order produces; a confident one points at a real bug."""
    d = S.step_difference(plain.token_ids, plain.logprobs, spec.token_ids, spec.logprobs)
    if d is None:
        return None
    out: dict[str, Any] = {"prompt": prompt[:40], **d, "token_flip": None}
    flip = S.first_divergence(plain.token_ids, spec.token_ids)
    if flip is not None:
        m = (
            S.top_margin(plain.top_logprobs[flip])
            if plain.top_logprobs and flip < len(plain.top_logprobs)
            else None
        )
        out["token_flip"] = {"step": flip, "margin": m, "margin_class": S.classify_margin(m)}
    return out


def _first_flip(diffs: list[dict]) -> dict:
    flips = [{**d["token_flip"], "prompt": d["prompt"]} for d in diffs if d["token_flip"]]
    return min(flips, key=lambda f: f["step"]) if flips else {}


def speculative_sweep(plain: Target, spec: Target, profile: str, seed: int) -> Outcome:
    """All prompts as one greedy batch on each target; per prompt, the first step where token ids or
    logprob bits differ; the speculative target's acceptance over exactly this batch."""
    prompts = list(SPEC_PROMPTS)
    params = GenParams(max_tokens=24 if profile == "quick" else 64, logprobs=2)
    info = spec.info or {}
    shape = {"sweep": "speculative", "prompts": len(prompts), "max_tokens": params.max_tokens,
             "speculative": info.get("speculative"), "plain_url": plain.url, **dispatch_shape(spec)}  # fmt: skip
    try:
        ref = send(plain, prompts, params, seed)
        before = spec_stats(spec)
        got = send(spec, prompts, params, seed)
        acc = _acceptance(before, spec_stats(spec))
    except AdapterError as exc:
        return Outcome(None, {"error": str(exc)}, f"incomplete: {exc}", shape, error=str(exc))
    diffs = [d for p, a, b in zip(prompts, ref, got, strict=True) if (d := _difference(a, b, p)) is not None]
    first = min(diffs, key=lambda d: d["step"]) if diffs else {}
    flip = _first_flip(diffs)
    ev = {"samples": 2 * len(prompts), "unique": 2 if diffs else 1, "differing_prompts": len(diffs),
          "token_flips": sum(1 for d in diffs if d["token_flip"]), "differences": diffs, "acceptance": acc,
          "first": {"token_index": first["step"], "label": f"{first['what']}: {first['prompt']!r}"} if first else {},
          "first_token_flip": flip}  # fmt: skip
    if flip:
        ev["first"].update(margin=flip["margin"], margin_class=flip["margin_class"])
    blind = None
    if acc is None:
        blind = "acceptance not proven: the speculative target reports no speculative_stats"
    elif acc["accepted_tokens"] == 0:
        blind = f"no draft was accepted ({acc['draft_tokens']} drafted): the target decoded plainly"
    rate = f"{acc['accepted_tokens']}/{acc['draft_tokens']} drafts accepted" if acc else "acceptance unknown"
    text = f"{len(prompts)} prompts plain vs speculative ({rate}): " + (
        f"{len(diffs)} differ, first {first['what']} difference at step {first['step']}"
        + (
            f"; first token flip at step {flip['step']} ({flip['margin_class'] or 'margin unknown'})"
            if flip
            else ""
        )
        if diffs
        else "token ids and logprob bits equal at every step"
    )
    return Outcome(bool(diffs), ev, text, shape, blind=blind)


_OUTCOMES: dict[tuple, Outcome] = {}


def run_pair(plain: Target, spec: Target, profile: str, seed: int) -> Outcome:
    """One sweep per pair and session: the invariant check's control and the inverse test share it."""
    key = (plain.url, spec.url, profile, seed)
    if key not in _OUTCOMES:
        _OUTCOMES[key] = speculative_sweep(plain, spec, profile, seed)
    return _OUTCOMES[key]


def _extra(plain: Target, out: Outcome) -> dict:
    return {
        "plain_target": plain.url,
        "plain_server_info": plain.config(),
        "acceptance": out.evidence.get("acceptance"),
    }


def speculative_check(
    invariance: Any, plain: Target, spec: Target, plain_ctl: Target, spec_ctl: Target
) -> dict:
    """Invariant mode: speculative == plain bitwise with drafts accepted; the control is the default
    -mode pair, which must diverge (else ``vacuous``)."""
    __tracebackhide__ = True
    out = run_pair(plain, spec, invariance.profile, invariance.seed)
    ctl = None
    if out.error is None:
        c = run_pair(plain_ctl, spec_ctl, invariance.profile, invariance.seed)
        obs = Observation(c.diverged, {**c.evidence, "summary": c.summary}, c.summary, c.error)
        ctl = Control(f"default-mode pair {plain_ctl.url} vs {spec_ctl.url}", obs)
    return _judge(invariance, spec, out, ctl, SPECULATIVE, "invariant", _extra(plain, out))


def speculative_inverse_check(invariance: Any, plain: Target, spec: Target) -> dict:
    """Default mode: the sweep must see speculative and plain decoding differ somewhere."""
    __tracebackhide__ = True
    out = run_pair(plain, spec, invariance.profile, invariance.seed)
    return _judge(
        invariance, spec, out, None, SPECULATIVE, "divergent", {"inverse": True, **_extra(plain, out)}
    )
