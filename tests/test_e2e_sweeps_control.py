"""The e2e positive control is flagged when it ran on other software than the target."""

from __future__ import annotations

from pytest_invariance.suites.e2e._sweeps import Outcome, Target, control_record


class _Adapter:  # the fields a Target label reads; no requests are made
    engine = "openai"
    base_url = "http://target:8000"


def _target(origin: str, role: str) -> Target:
    return Target(_Adapter(), role, "invariant" if role == "target" else "default", mode="x", origin=origin)


def test_control_on_the_bundled_engine_for_a_url_target_is_foreign() -> None:
    out = Outcome(True, {"unique": [1, 3]}, "3 unique", {})
    rec = control_record(_target("url", "target"), _target("bundled", "control"), out)
    assert rec["foreign"] and "--invariance-url-control" in rec["note"] and rec["diverged"] is True
    same = control_record(_target("url", "target"), _target("url", "control"), out)
    assert not same["foreign"] and "note" not in same
    assert not control_record(_target("bundled", "target"), _target("bundled", "control"), out)["foreign"]
