"""``extra.localization`` of a divergent bundled-engine record: the step where the probe first
differed, replayed op by op (``localize.replay``).

Only for the bundled engine this session started, in default mode, when the sweep diverged: its
``/server_info`` describes everything the replay must rebuild (weights seed, dtype, device,
kernel knobs), which a URL target's does not. Which step: the first batch (in the order sent) in
which a probe request's token ids differ from the probe alone, and within it the request that
differed earliest (token k); where only logprob bits differ, the first such step. The batch
replayed is that batch's requests still generating at step k, each at its own token k, in request
order: exact when they were prefilled in one step and decoded together (a list request whose
prompts fit one step's token budget), an approximation where long neighbours were still
prefilling while the probe decoded (the field's ``assumes`` says so).
"""

from __future__ import annotations

from pytest_invariance.adapters.base import LIST
from pytest_invariance.oracles import sequences as S

from .sweeps import Batch, Outcome
from .target import Target

REPLAYED = ("single", "needle", "mixed", "logprobs")
ASSUMES = "every request of the batch at the same token index (exact when one step prefilled them all)"


def applies(t: Target, out: Outcome) -> bool:
    """Whether a record of ``t``'s outcome carries a localization at all."""
    return t.started_here and t.engine == "bundled" and t.mode == "default" and out.diverged is True


def localization(t: Target, out: Outcome) -> dict | None:
    """The replay's finding (a culprit, or a reason), once per outcome; None where it does not apply."""
    if not applies(t, out):
        return None
    if out.localization is None:
        out.localization = _localize(t, out)
    return out.localization


def first_flip(batches: list[Batch]) -> tuple[int, int, int, str] | None:
    """``(batch index, slot, token index, what)`` of the probe's earliest difference from the probe
    alone (``batches[0]``): the earliest token flip over every batch (the least drift before it; the
    smaller batch on a tie), else the earliest logprob-bits difference."""
    if not batches or len(batches[0].tokens) != 1:
        return None
    ref, ref_lps = batches[0].tokens[0], batches[0].logprobs[0]
    flips, bits = [], []
    for bi, b in enumerate(batches[1:], 1):
        for s in b.probe_slots:
            d = S.step_difference(ref, ref_lps, b.tokens[s], b.logprobs[s])
            if d is None or d["what"] not in ("token", "logprob"):
                continue
            if d["what"] == "logprob":  # bits first; a token may still flip later
                bits.append((int(d["step"]), len(b.tokens), bi, s))
                d = {"step": S.first_divergence(ref, b.tokens[s])}
                if d["step"] is None or d["step"] >= min(len(ref), len(b.tokens[s])):
                    continue
            flips.append((int(d["step"]), len(b.tokens), bi, s))
    for found, what in ((flips, "token"), (bits, "logprob")):
        if found:
            k, _, bi, s = min(found)
            return bi, s, k, what
    return None


def _localize(t: Target, out: Outcome) -> dict:
    sweep = (out.shape or {}).get("sweep")
    if sweep not in REPLAYED:
        return {"reason": f"the {sweep} sweep's steps are not replayed (only {', '.join(REPLAYED)})"}
    if t.dispatch != LIST:
        return {"reason": "independent dispatch: which requests shared the differing step is not known"}
    flip = first_flip(out.batches)
    if flip is None:
        return {"reason": "no probe request differed from the probe alone (the copies differed among themselves)"}
    bi, slot, k, what = flip
    b, info = out.batches[bi], t.info or {}
    where = {"token_index": k, "what": what, "request_batch": len(b.tokens), "assumes": ASSUMES}
    if any(p is None for p in b.prompts) or out.batches[0].prompts[0] is None:
        return {**where, "reason": "the server returned no prompt token ids"}
    from pytest_invariance.localize.replay import ReplayUnsupported, Request, replay_step

    live = [j for j in range(len(b.tokens)) if len(b.tokens[j]) >= k]  # still generating at step k
    reqs = {j: Request(tuple(b.prompts[j] or ()), tuple(b.tokens[j][:k])) for j in live}
    if k == 0 and sum(len(r.prompt) for r in reqs.values()) > int(info.get("max_num_batched_tokens") or 0):
        return {**where, "reason": "the prompts' prefill spanned several steps (over the step's token budget)"}
    if len(live) > int(info.get("max_num_seqs") or 0):
        return {**where, "reason": f"{len(live)} requests exceed max_num_seqs: which shared the step is not known"}
    try:
        loc = replay_step(info, reqs[slot], [reqs[j] for j in live if j != slot], live.index(slot))
    except ReplayUnsupported as exc:
        return {**where, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a replay that raises costs the field, never the record
        return {**where, "reason": f"replay raised {type(exc).__name__}: {exc}".splitlines()[0]}
    ref = out.batches[0].tokens[0]
    bits = S.step_difference(ref, out.batches[0].logprobs[0], b.tokens[slot], b.logprobs[slot])
    # where the request's logprob bits differed before step k, its real cache had drifted already
    where["first_bitwise_step"] = int(bits["step"]) if bits is not None else None
    loc.update(where)
    if what == "token":
        loc.update(reference_token=ref[k], flipped_token=b.tokens[slot][k],
                   alone_reproduced=loc["alone_token"] == ref[k], flip_reproduced=loc["batched_token"] == b.tokens[slot][k])  # fmt: skip
    return loc
