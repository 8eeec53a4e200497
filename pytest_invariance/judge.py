"""The one judge: what a check observed, what its positive control observed, the subject and the
expectation in; the verdict, the record and the test's outcome out.

The per-op fixture methods and the e2e sweeps both end here, so a verdict means the same wherever
it was reached: ``invariant`` only beside a control that diverged; ``incomplete`` when the subject
or its control raised, with the error's one line in the message and the record; ``vacuous`` when
the control saw nothing; ``unsupported`` skips.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_invariance.oracles import verdict as V
from pytest_invariance.oracles.classes import format_ranges
from pytest_invariance.records import describe_localization

EXPECTS = ("invariant", "divergent", "measure")


class InvarianceFailure(AssertionError):
    """A verdict other than the one the test demanded; the message carries the evidence."""


@dataclass
class Observation:
    """What one check saw on one subject. ``diverged`` is None when it could not tell."""

    diverged: bool | None
    evidence: dict
    summary: str = ""
    error: str | None = None  # why it stopped short (a raise, a timeout, a bad response)
    unsupported: str | None = None  # why it could not run here at all
    blind: str | None = None  # why equality here proves nothing (e.g. a cache hit not proven)


@dataclass
class Control:
    """The named positive control and what it observed (``observation`` None: not run)."""

    name: str
    observation: Observation | None
    fields: dict = field(default_factory=dict)  # extra record fields (``foreign``, ``note``...)

    @property
    def diverged(self) -> bool | None:
        obs = self.observation
        return None if obs is None or obs.error is not None else obs.diverged

    def as_record(self) -> dict:
        obs = self.observation
        rec: dict[str, Any] = {"name": self.name, "diverged": self.diverged,
                               "evidence": dict(obs.evidence) if obs else {}, **self.fields}  # fmt: skip
        if obs is not None and obs.error is not None:
            rec["error"] = obs.error
        return rec


def decide(observed: Observation, control: Control | None) -> str:
    """The verdict: a control that raised makes the check ``incomplete``, not ``vacuous``; an
    equality the check could not have told apart from a pass (``blind``) is ``vacuous``."""
    control_error = control is not None and control.observation is not None and control.observation.error
    if observed.blind and observed.diverged is False and not observed.error and not control_error:
        return V.VACUOUS
    return V.decide(
        observed.diverged,
        control.diverged if control is not None else None,
        error=observed.error is not None or bool(control_error),
        unsupported=observed.unsupported is not None,
    )


def judge(
    invariance: Any,
    observed: Observation,
    control: Control | None,
    *,
    expect: str,
    context: str = "",
    extra: Mapping[str, Any] | None = None,
    **subject: Any,
) -> dict:
    """Decide, attach the record through ``invariance.record`` and enforce ``expect``.

    ``subject`` holds the record's fields (family, implementation, oracle, quantization, shape,
    contract, trials...); ``context`` is appended to a failure message. Returns the record."""
    __tracebackhide__ = True
    if expect not in EXPECTS:
        raise ValueError(f"expect={expect!r}; expected one of {', '.join(EXPECTS)}")
    rec = invariance.record(
        verdict=decide(observed, control),
        evidence=observed.evidence,
        control=control.as_record() if control is not None else None,
        extra={**(extra or {}), "expect": expect, "summary": observed.summary},
        **subject,
    )
    enforce(rec, expect, observed, control, context)
    return rec


def enforce(
    rec: Mapping[str, Any],
    expect: str,
    observed: Observation,
    control: Control | None = None,
    context: str = "",
) -> None:
    """Skip (unsupported), fail in one line (incomplete), or fail with the evidence (another verdict)."""
    __tracebackhide__ = True
    if observed.unsupported is not None:
        pytest.skip(f"unsupported: {observed.unsupported}")
    if rec["verdict"] == V.INCOMPLETE:
        where = (rec.get("shape") or {}).get("sweep") if isinstance(rec.get("shape"), Mapping) else None
        ctl_error = control.observation.error if control is not None and control.observation else None
        why = observed.error or (f"control {control.name} raised: {ctl_error}" if ctl_error else "no result")
        pytest.fail(f"{rec['oracle']} on {rec['implementation']}{f' ({where})' if where else ''} incomplete: {why}",
                    pytrace=False)  # fmt: skip
    if expect != "measure" and rec["verdict"] != expect:
        raise InvarianceFailure(failure_message(rec, expect) + context)


def failure_message(rec: Mapping[str, Any], expect: str) -> str:
    """Readable failure: oracle, implementation, where it first differed, max ULP, contract, control."""
    ev = rec.get("evidence") or {}
    summary = (rec.get("extra") or {}).get("summary") or ""
    lines = [
        f"expected {expect}, got {rec['verdict']}: {rec['family']} / {rec['implementation']}"
        f" / {rec.get('quantization')} / oracle {rec['oracle']} [contract {rec['contract']}]",
    ]
    if summary:
        lines.append(f"  {summary}")
    if ev.get("equivalence_classes"):
        lines.append(f"  equivalence classes of batch sizes: {format_ranges(ev['equivalence_classes'])}")
    if ev.get("differing_batch_sizes"):
        lines.append(f"  differing batch sizes: {ev['differing_batch_sizes']}")
    if loc := describe_localization((rec.get("extra") or {}).get("localization")):
        lines.append(f"  {loc}")
    ctl = rec.get("control")
    if ctl:
        lines.append(f"  control {ctl['name']}: {'diverged' if ctl.get('diverged') else 'did NOT diverge'}")
    elif rec["verdict"] == V.VACUOUS:
        lines.append("  no positive control was run, so equality cannot count as invariance")
    if rec["verdict"] == V.VACUOUS:
        blind = ev.get("blind")
        lines.append(f"  vacuous: {blind}" if blind else "  vacuous: the check could not have seen a divergence on these inputs")
    lines.append(f"  shape {rec.get('shape')}, dtype {rec.get('dtype')}, seed {rec.get('seed')}")
    return "\n".join(lines)
