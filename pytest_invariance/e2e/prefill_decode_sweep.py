"""The prefill-decode sweep: each decoded token's logprob vs the prefill rescoring of the prompt
plus the generated tokens, bitwise (a decode kernel and a prefill kernel must agree)."""

from __future__ import annotations

from pytest_invariance.adapters import AdapterError, GenParams
from pytest_invariance.oracles import sequences as S

from .outcome import Outcome, needs_logprobs
from .prompts import other, probe
from .target import Target


def sweep_prefill_decode(t: Target, profile: str, seed: int) -> Outcome:
    """Each decoded token's logprob vs the prefill rescoring of prompt + generated tokens, bitwise."""
    prompts = (
        [probe(t), other(t, 3, 40)]
        if profile == "quick"
        else [probe(t)] + [other(t, i, 40 + 20 * i) for i in range(4)]
    )
    params = GenParams(max_tokens=16, logprobs=0)
    shape = {"sweep": "prefill-decode", "prompts": len(prompts), "max_tokens": params.max_tokens}
    if (skip := needs_logprobs(t, shape)) is not None:
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
