"""A divergent default-mode record of the bundled engine carries ``extra.localization``: the first op
that diverged at the probe's first flipped token, found by replaying that engine step (the probe
alone vs inside its batch, each request's cache rebuilt alone). Invariant-mode records and URL
targets carry none; a step that is not replayed says why.

Against the real bundled server on the demo model (in this process's thread, default and invariant
mode), the ``logprobs`` sweep: the probe alone, then among 7 neighbours of 4..300 characters.
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from pytest_invariance.adapters.bundled import BundledAdapter  # noqa: E402
from pytest_invariance.e2e import Outcome, Target, invariant_check, inverse_check  # noqa: E402
from pytest_invariance.e2e.localization import first_flip, localization  # noqa: E402
from pytest_invariance.e2e.sweeps import Batch  # noqa: E402
from pytest_invariance.engine.config import EngineConfig  # noqa: E402
from pytest_invariance.engine.server import ServerThread, create_app  # noqa: E402
from pytest_invariance.judge import failure_message  # noqa: E402
from pytest_invariance.records import RecordError, describe_localization, parse_record  # noqa: E402
from pytest_invariance.summary import summary_lines  # noqa: E402

# Default mode's designed mechanisms and the module paths of BundledLM where they run.
GEMMS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj", "lm_head")
KERNELS = {"matmul": "mutant:m-bucket-splitk", "attention-decode": "mutant:splitkv-decode-batched"}


@pytest.fixture(scope="module")
def default_url():
    with ServerThread(create_app(EngineConfig())) as url:
        yield url


def _target(url: str, mode: str, *, here: bool) -> Target:
    t = Target(BundledAdapter(url), "control" if mode == "default" else "target", mode, started_here=here)
    t.refresh()
    return t


def test_divergent_default_record_names_the_first_op_of_a_designed_mechanism(invariance, default_url) -> None:
    rec = inverse_check(invariance, "logprobs", _target(default_url, "default", here=True))
    assert rec["verdict"] == "divergent"
    loc = rec["extra"]["localization"]
    c = loc["culprit"]
    assert c["module"].endswith((*GEMMS, "self_attn.attn")), loc
    assert c["kernel"] == KERNELS[c["family"]] and c["op"].startswith(("aten.", "KernelCall")), loc
    assert loc["batch_size"] == 8 and loc["step"] == "decode" and loc["token_index"] >= 1, loc
    if loc["what"] == "token":  # the replayed alone step reproduces the alone run's token there
        assert loc["alone_reproduced"], loc
    assert loc["seconds"] < 30
    assert describe_localization(loc).startswith(f"first op that diverged at token {loc['token_index']} (decode step, batch 8)")
    assert f"at {c['module']}" in summary_lines([rec])[0]


def test_invariant_mode_and_url_records_carry_none(invariance, default_url) -> None:
    with ServerThread(create_app(EngineConfig(batch_invariant=True))) as inv_url:
        rec = invariant_check(invariance, "logprobs", _target(inv_url, "invariant", here=True),
                              _target(default_url, "default", here=True))  # fmt: skip
    assert rec["verdict"] == "invariant" and rec["control"]["diverged"] is True
    assert "localization" not in rec["extra"]
    url_rec = inverse_check(invariance, "logprobs", _target(default_url, "default", here=False))
    assert url_rec["verdict"] == "divergent" and "localization" not in url_rec["extra"]


class _Adapter:  # the fields a Target reads for its label and engine; no requests are made
    engine = "bundled"
    base_url = "http://127.0.0.1:1"


def test_a_sweep_whose_steps_are_not_replayed_says_why() -> None:
    t = Target(_Adapter(), "control", "default", info={"engine": "bundled"}, mode="default", started_here=True)
    loc = localization(t, Outcome(True, {}, "differ", {"sweep": "prefix"}))
    assert loc is not None and "prefix sweep's steps are not replayed" in loc["reason"] and "culprit" not in loc
    assert localization(t, Outcome(False, {}, "equal", {"sweep": "single"})) is None  # not divergent: no field


def test_first_flip_is_the_earliest_token_flip_else_the_first_logprob_difference() -> None:
    alone = Batch([[1]], [[5, 6, 7, 8]], [[-1.0, -1.0, -1.0, -1.0]], [0])
    b2 = Batch([[1], [1]], [[5, 6, 9, 8], [5, 6, 7, 8]], [[-1.0] * 4, [-1.0] * 4], [0, 1])
    b4 = Batch([[1]] * 4, [[5, 3, 7, 8]] + [[5, 6, 7, 8]] * 3, [[-1.0] * 4] * 4, [0, 1, 2, 3])
    assert first_flip([alone, b2, b4]) == (2, 0, 1, "token")
    bits = Batch([[1], [2]], [[5, 6, 7, 8], [4]], [[-1.0, -1.5, -1.0, -1.0], [-1.0]], [0])
    assert first_flip([alone, bits]) == (1, 0, 1, "logprob")
    assert first_flip([alone, Batch([[1]], [[5, 6, 7, 8]], [[-1.0] * 4], [0])]) is None


def _record(loc: object) -> dict:
    return {"schema": "pytest-invariance.record/1", "run_id": "r", "time": "t", "hardware": {"name": "cpu"},
            "software": {}, "family": "engine", "implementation": "bundled", "mode": "default", "quantization": "bf16",
            "dtype": "bfloat16", "shape": {"sweep": "single"}, "oracle": "unique-samples", "contract": "bitwise",
            "verdict": "divergent", "evidence": {}, "control": None, "cost": None, "nodeid": "n",
            "extra": {"localization": loc}}  # fmt: skip


def test_records_check_the_localization_field_and_messages_print_it() -> None:
    for bad, why in (("x", "not an object"), ({"step": "decode"}, "neither a culprit nor a reason"),
                     ({"culprit": {"module": "m"}}, "names no module and op")):  # fmt: skip
        with pytest.raises(RecordError, match=why):
            parse_record(_record(bad))
    rec = parse_record(_record({"reason": "the prefix sweep's steps are not replayed", "token_index": 3}))
    assert "not localized: the prefix sweep" in failure_message(rec, "invariant")
    loc = {"step": "decode", "token_index": 4, "batch_size": 16, "reason": "no op differed for the probe row"}
    assert describe_localization(loc) == "replayed token 4 (decode step, batch 16): no culprit: no op differed for the probe row"
    assert describe_localization(loc, short=True) == ""
