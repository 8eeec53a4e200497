"""The e2e positive control is flagged when it ran on other software than the target."""

from __future__ import annotations

from pytest_invariance.e2e import Outcome, Target, control_record


class _Adapter:  # the fields a Target label reads; no requests are made
    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.base_url = f"http://{engine}:8000"


def _target(engine: str, model: str, role: str = "target") -> Target:
    expected = "invariant" if role == "target" else "default"
    return Target(_Adapter(engine), role, expected, info={"model": model}, mode="x")


def test_control_on_another_engine_or_model_is_foreign() -> None:
    out = Outcome(True, {"unique": [1, 3]}, "3 unique", {})
    rec = control_record(_target("vllm", "llama"), _target("bundled", "demo", "control"), out)
    assert rec["foreign"] and "--invariance-url-control" in rec["note"] and rec["diverged"] is True
    same = control_record(_target("vllm", "llama"), _target("vllm", "llama", "control"), out)
    assert not same["foreign"] and "note" not in same
    assert control_record(_target("vllm", "llama"), _target("sglang", "llama", "control"), out)["foreign"]
    assert control_record(_target("openai", "llama"), _target("openai", "qwen", "control"), out)["foreign"]


def test_a_control_whose_server_names_its_model_only_in_answers_is_not_foreign() -> None:
    """transformers serve fails /v1/models: the control's info has no model until it answered."""
    out = Outcome(True, {"unique": [1, 2]}, "2 unique", {})
    control = _target("openai", "", "control")
    control.info = {}
    control.adapter.answered_model = "tiny@main"
    assert not control_record(_target("openai", "tiny@main"), control, out)["foreign"]
    control.adapter.answered_model = "other@main"
    assert control_record(_target("openai", "tiny@main"), control, out)["foreign"]
