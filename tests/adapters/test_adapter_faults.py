"""The fault matrix: against a server that misbehaves in each way we know of, a request ends in one
AdapterError of one line naming the URL, within a bounded time, never a traceback or a hang; and a
real e2e sweep run through pytest turns it into an ``incomplete`` record and a non-zero exit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fake_server import FakeServer, closed_port_url

from pytest_invariance.adapters import AdapterError, GenParams, make_adapter

P = GenParams(max_tokens=3)
# Small bounds so each case takes about a second: the read timeout is longer than a drip's gap, so
# only the deadline can end a drip.
FAST = {"timeout_s": 1.0, "deadline_s": 1.5, "connect_timeout_s": 1.0, "retries": 1}
BOUND_S = 4.0

# fault -> the field its AdapterError names
MATRIX = {
    "refuse": "connection",
    "reset": "connection",  # reset before any header
    "reset_mid_body": "connection",
    "close_mid_body": "connection",
    "never": "timeout",
    "drip": "deadline",
    "drip_headers": "deadline",
    "http500": "status",
    "busy_forever": "overloaded",  # 503 with Retry-After, retried until the deadline, then given up
    "busy_bare": "status",  # 503 without Retry-After: not retried
    "malformed": "body",
    "deep": "body",
    "missing": "choices[0].token_ids",
    "truncated_sse": "connection",
}


def _fault_url(fault: str, stack) -> str:
    if fault == "refuse":
        return closed_port_url()
    return stack.enter_context(FakeServer(fault, drip_s=0.3)).url


@pytest.mark.parametrize("fault", sorted(MATRIX))
def test_every_fault_is_one_adapter_error_in_bounded_time(fault: str) -> None:
    from contextlib import ExitStack

    with ExitStack() as stack:
        url = _fault_url(fault, stack)
        adapter = make_adapter("vllm", url, **FAST)
        t0 = time.monotonic()
        with pytest.raises(AdapterError) as info:
            adapter.generate(["hi"], P, dispatch="list")
        took = time.monotonic() - t0
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(url), msg
    assert info.value.field == MATRIX[fault], msg
    assert took < BOUND_S, f"{fault}: {took:.1f} s"


def test_deadline_cuts_a_drip_off_at_the_deadline_not_the_read_timeout() -> None:
    with FakeServer("drip", drip_s=0.2) as srv:
        adapter = make_adapter("vllm", srv.url, timeout_s=30.0, deadline_s=1.0, retries=0)
        t0 = time.monotonic()
        with pytest.raises(AdapterError) as info:
            adapter.generate(["hi"], P, dispatch="list")
        took = time.monotonic() - t0
    assert info.value.field == "deadline" and 1.0 <= took < 1.5, (str(info.value), took)


def test_after_a_timeout_the_adapter_stops_sending() -> None:
    with FakeServer("never") as srv:
        adapter = make_adapter("vllm", srv.url, **FAST)
        with pytest.raises(AdapterError):
            adapter.generate(["a"], P, dispatch="list")
        t0 = time.monotonic()
        with pytest.raises(AdapterError) as info:
            adapter.generate(["b"], P, dispatch="list")
        assert time.monotonic() - t0 < 0.1 and srv.requests == 1
        assert info.value.field == "timeout" and "not sent: an earlier request" in str(info.value)


def test_bad_url_is_one_line() -> None:
    for url in ("not-a-url", "http://", "http://127.0.0.1:99999"):
        with pytest.raises(AdapterError) as info:
            make_adapter("openai", url, retries=0).generate(["x"], P, dispatch="list")
        assert "\n" not in str(info.value) and info.value.field in ("url", "connection"), str(info.value)


def test_default_deadline_grows_with_tokens_requested() -> None:
    from pytest_invariance.adapters.base import default_deadline

    assert default_deadline(120.0, {"max_tokens": 48}) == 178.0
    assert default_deadline(120.0, {"sampling_params": {"max_new_tokens": 10}}) == 140.0
    assert default_deadline(5.0, None) == 15.0


SUITE_DIR = Path(__file__).resolve().parents[2] / "suites" / "e2e"
E2E_FAULTS = ("refuse", "reset_mid_body", "close_mid_body", "never", "drip", "malformed", "truncated_sse")


@pytest.mark.parametrize("fault", E2E_FAULTS)
def test_e2e_sweep_against_a_faulty_server_is_incomplete_with_records(
    fault: str, pytester: pytest.Pytester
) -> None:
    """The real suites/e2e conftest and test_single: the fault becomes an ``incomplete`` record
    naming it, the run exits non-zero, and nothing hangs. /v1/models answers (a fake that serves
    the models route), so the fault hits the sweep's own requests."""
    from contextlib import ExitStack

    pytester.makeconftest((SUITE_DIR / "conftest.py").read_text())
    pytester.makepyfile(test_single=(SUITE_DIR / "test_single.py").read_text())
    rec = pytester.path / "rec.jsonl"
    with ExitStack() as stack:
        ok = stack.enter_context(FakeServer("ok"))
        if fault == "refuse":
            url = closed_port_url()
            pytester.makeconftest((SUITE_DIR / "conftest.py").read_text().replace(
                "adapter.get(\"/v1/models\" if engine != \"sglang\" else \"/model_info\", timeout_s=15)", "pass"))
        else:
            url = stack.enter_context(FakeServer(fault, drip_s=0.3)).url
        t0 = time.monotonic()
        result = pytester.runpytest(
            f"--invariance-url={url}", f"--invariance-url-control={ok.url}", "--invariance-engine=vllm",
            f"--invariance-records={rec}", "--invariance-request-timeout=1", "--invariance-request-deadline=1.5",
            "-p", "no:randomly",
        )  # fmt: skip
        took = time.monotonic() - t0
    assert result.ret != 0
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-2000:]
    records = [json.loads(line) for line in rec.read_text().splitlines()]
    assert [r["verdict"] for r in records] == ["incomplete"], records
    err = records[0]["evidence"]["error"]
    assert err.startswith(url) and "\n" not in err, err
    assert took < 10, took
