"""The e2e checks: a sweep on a target and on its positive control, judged by the one judge.

``invariant_check`` is the invariance test (the target must not diverge, its control must);
``inverse_check`` the inverse test (with invariance off the sweep must see divergence); the seeded
checks do the same for sampling with a seed. Every record names the target's engine, mode and
reported configuration, and flags a control that ran on other software (``foreign``).
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_invariance.judge import Control, Observation, judge
from pytest_invariance.oracles import sequences as S
from pytest_invariance.oracles.vocabulary import SHARED_RNG, quantization_of

from .localization import localization
from .sweeps import SWEEPS, Outcome, run_cached, seeded_sweep
from .target import Target, engine_identity


def observation(t: Target, out: Outcome) -> Observation:
    ev = {**out.evidence, "url": t.url, **({"blind": out.blind} if out.blind else {})}
    return Observation(out.diverged, ev, out.summary, out.error, out.unsupported, out.blind)


def subject(invariance: Any, t: Target, oracle: str, out: Outcome, extra: dict | None = None) -> dict:
    """The record fields that say what was checked, on which engine, in which configuration."""
    info = t.info or {}
    variant = f"+{SHARED_RNG}" if info.get("shared_rng") else ""  # a control variant gets its own matrix row
    if int(info.get("tp_size") or 1) > 1:  # so does a tensor-parallel engine: TP sizes are not one row
        variant += f"+tp{int(info['tp_size'])}"
    return {
        "family": "engine", "implementation": (info.get("implementation") or t.engine) + variant, "mode": t.mode, "oracle": oracle,
        "quantization": quantization_of(info.get("dtype") or "unknown"), "dtype": info.get("dtype"),
        "shape": {**out.shape, "model": info.get("model") or info.get("served_model_name")
                  or getattr(t.adapter, "answered_model", None)},  # the answers name it where /v1/models fails
        "contract": "bitwise", "seed": invariance.seed, "trials": 1, "profile": invariance.profile,
        "extra": {
            "role": t.role, "target": t.name, "server_info": t.config(),
            "mode_check": t.mode_check() or ("consistent" if t.mode else "mode not reported by the server"),
            "engine_log": t.log_path, **(extra or {}),
        },
    }  # fmt: skip


def control_of(target: Target, control: Target, ctl_out: Outcome) -> Control:
    """The positive control, flagged ``foreign`` when it ran on other software than the target.

    Foreign means another engine or model (``engine_identity``): with ``--invariance-url`` and no
    ``--invariance-url-control`` the control is the bundled engine, which shows that the sweep's
    prompts and comparison can observe batch dependence, not that the target's own kernels would
    show it with invariance off."""
    foreign = engine_identity(target) != engine_identity(control)
    fields: dict[str, Any] = {"foreign": foreign}
    if control.control_note:
        fields["note"] = control.control_note
    elif foreign:
        fields["note"] = (f"the control ran on {control.label}, not on the target's engine and model with "
                          "invariance off (--invariance-url-control names one)")  # fmt: skip
    obs = Observation(ctl_out.diverged, {**ctl_out.evidence, "summary": ctl_out.summary}, ctl_out.summary,
                      ctl_out.error)  # fmt: skip
    return Control(f"inverse target {control.label}", obs, fields)


def control_record(target: Target, control: Target, ctl_out: Outcome) -> dict:
    """``control_of`` as the record's ``control`` field."""
    return control_of(target, control, ctl_out).as_record()


def _judge(invariance: Any, t: Target, out: Outcome, ctl: Control | None, oracle: str, expect: str,
           extra: dict | None = None) -> dict:  # fmt: skip
    __tracebackhide__ = True
    flag = t.mode_check()
    context = f"\n  target {t.label}" + (f"\n  MODE CHECK: {flag}" if flag else "")
    loc = localization(t, out)  # the bundled engine's divergent default mode: its first differing op
    if loc is not None:
        extra = {**(extra or {}), "localization": loc}
    rec = judge(invariance, observation(t, out), ctl, expect=expect, context=context,
                **subject(invariance, t, oracle, out, extra))  # fmt: skip
    if flag:
        pytest.fail(f"mode check: {flag} (sweep: {out.summary})", pytrace=False)
    return rec


def invariant_check(invariance: Any, name: str, target: Target, control: Target) -> dict:
    """The sweep on ``target`` must show no divergence, and the same sweep on the positive control
    (invariance off) must show some; otherwise the result is ``vacuous``."""
    __tracebackhide__ = True
    out = run_cached(target, name, invariance.profile, invariance.seed)
    ctl = None
    if out.error is None:
        ctl = control_of(target, control, run_cached(control, name, invariance.profile, invariance.seed))
    return _judge(invariance, target, out, ctl, SWEEPS[name][1], "invariant")


def inverse_check(invariance: Any, name: str, control: Target) -> dict:
    """With invariance off the same sweep must observe divergence."""
    __tracebackhide__ = True
    out = run_cached(control, name, invariance.profile, invariance.seed)
    return _judge(invariance, control, out, None, SWEEPS[name][1], "divergent", {"inverse": True})


def seeded_check(invariance: Any, t: Target) -> dict:
    """temperature > 0 with one seed: the same tokens at every concurrency; the control: different
    seeds give different tokens (else the seed is ignored and the check is vacuous). A second,
    batch-dependent control is ``seeded_inverse_check`` on an engine with a shared RNG."""
    __tracebackhide__ = True
    out, others = seeded_sweep(t, invariance.profile, invariance.seed)
    ctl = None
    if out.error is None:
        n_unique, _ = S.unique_completions([c.token_ids for c in others])
        ev = {"samples": len(others), "unique": n_unique}
        ctl = Control("different-seeds (1, 2, 3, 4)", Observation(n_unique > 1, ev))
    return _judge(invariance, t, out, ctl, "seeded-sampling", "invariant")


def seeded_inverse_check(invariance: Any, t: Target) -> dict:
    """The seeded sweep on an engine whose sampler draws from one engine-wide RNG in batch order
    (bundled ``--shared-rng``): a request's tokens then depend on what else was sampled, and the
    sweep must see it. Proves the sweep can observe batch-dependent sampling, not only ignored seeds."""
    __tracebackhide__ = True
    out, _ = seeded_sweep(t, invariance.profile, invariance.seed)
    return _judge(invariance, t, out, None, "seeded-sampling", "divergent",
                  {"inverse": True, "control_kind": "shared engine-wide RNG (--shared-rng)"})  # fmt: skip
