"""Each planted bug is visible where it should be and invisible where it should not."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from pytest_invariance.fakes import FakeEngine

PROBE = "The quick brown fox"


def _complete(url: str, prompt, max_tokens: int = 24, **extra) -> list[tuple[tuple, tuple]]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1, **extra}
    r = requests.post(url + "/v1/completions", json=body, timeout=60)
    r.raise_for_status()
    return [(tuple(c["token_ids"]), tuple(c["logprobs"]["token_logprobs"])) for c in r.json()["choices"]]


def _copies(url: str, n: int) -> set:
    return set(_complete(url, [PROBE] * n))


@pytest.fixture(scope="module")
def clean():
    with FakeEngine("none") as f:
        yield f


def test_clean_twin_is_batch_invariant_at_every_size(clean):
    alone = _complete(clean.url, PROBE)[0]
    assert all(_copies(clean.url, n) == {alone} for n in (2, 3, 5, 9))
    others = [PROBE + " " + "x" * k for k in (300, 40, 7)]
    assert _complete(clean.url, others[:1] + [PROBE] + others[1:])[1] == alone


def test_clean_twin_replays_concurrent_workloads_bitwise(clean):
    prompts = [f"[{i}] " + "ab" * (3 + 17 * i % 90) for i in range(24)]
    runs = [_concurrent(clean.url, prompts) for _ in range(2)]
    assert runs[0] == runs[1]


def _concurrent(url: str, prompts: list[str]) -> list:
    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(lambda p: _complete(url, p, 16)[0], prompts))


def test_padding_changes_rows_only_off_the_ladder():
    with FakeEngine("padding", ladder=(1, 2, 4, 8, 16)) as f:
        alone = _complete(f.url, PROBE)[0]
        for n in (2, 4, 8, 16):  # on the ladder: identical copies stay bitwise equal to the probe alone
            assert _copies(f.url, n) == {alone}, n
        for n in (3, 5, 9, 15):
            got = _copies(f.url, n)
            assert len(got) == 1 and got != {alone}, n
        assert _copies(f.url, 17) == {alone}  # above the ladder: eager, unpadded
        assert _copies(f.url, 5) != _copies(f.url, 9)  # each bucket pads its own way


@pytest.mark.parametrize("style,key", [("bundled", "cuda_graph_buckets"), ("sglang", "cuda_graph_bs")])
def test_padding_reports_its_ladder_where_asked(style, key):
    with FakeEngine("padding", report_ladder=style, ladder=(1, 2, 4, 8)) as f:
        assert requests.get(f.url + "/server_info", timeout=10).json()[key] == [1, 2, 4, 8]


def test_padding_reports_its_ladder_as_vllm_and_hides_it_as_plain_openai():
    with FakeEngine("padding", report_ladder="vllm", ladder=(1, 2, 4, 8)) as f:
        cfg = requests.get(f.url + "/server_info?config_format=json", timeout=10).json()["vllm_config"]
        assert cfg["compilation_config"]["cudagraph_capture_sizes"] == [1, 2, 4, 8]
    with FakeEngine("padding", report_ladder="none") as f:
        assert requests.get(f.url + "/server_info", timeout=10).status_code == 404


@pytest.mark.parametrize("trigger", ["long-prompt", "shared-prefix", "sampling"])
def test_neighbour_changes_the_probe_only_beside_its_trigger(trigger):
    with FakeEngine("neighbour", neighbour_trigger=trigger) as f:
        alone = _complete(f.url, PROBE)[0]
        plain = ["short one", "another short prompt", "z" * 40]
        assert _complete(f.url, [PROBE] + plain)[0] == alone
        assert _copies(f.url, 6) == {alone}
        if trigger == "long-prompt":  # copies of a long prompt do not disturb each other
            long = "y" * 300
            assert len(set(_complete(f.url, [long] * 3))) == 1 and _complete(f.url, long) == _complete(f.url, [long] * 3)[:1]
        if trigger == "sampling":
            hot = requests.post  # a sampled request runs beside the greedy probe
            with ThreadPoolExecutor(2) as pool:
                side = pool.submit(hot, f.url + "/v1/completions", json={"prompt": "hot", "max_tokens": 200,
                                                                          "temperature": 0.8}, timeout=60)  # fmt: skip
                got = pool.submit(_complete, f.url, PROBE, 24).result()[0]
                side.result().raise_for_status()
        else:
            trig = "y" * 300 if trigger == "long-prompt" else PROBE + " jumps over the lazy dog"
            got = _complete(f.url, [PROBE, trig])[0]
        assert got != alone


def test_replay_never_changes_a_single_request_and_changes_concurrent_replays():
    with FakeEngine("replay", replay_rate=0.5) as f:
        alone = _complete(f.url, PROBE)[0]
        assert all(_copies(f.url, n) == {alone} for n in (3, 8))  # one list request: one request id
        prompts = [f"[{i}] " + "cd" * (2 + 7 * i % 50) for i in range(16)]
        runs = [_concurrent(f.url, prompts) for _ in range(3)]
        assert runs[0] != runs[1] or runs[1] != runs[2]
        assert f.stats()["perturbed_rows"] > 0


def _cold_warm(url: str) -> tuple:
    prompt = "nonce-1 " + "the cache keeps whole blocks " * 8
    cold, warm = (requests.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 16, "temperature": 0,
                                                              "logprobs": 0}, timeout=60).json() for _ in range(2))  # fmt: skip
    return cold, warm


def test_warm_cache_copies_in_one_batch_do_not_hit_each_other():
    """Blocks become cacheable when their step ends, so identical copies in one list request are
    all cold (the single sweep's copies see no cache hit), as in a real engine's step."""
    with FakeEngine("warm-cache") as f:
        prompt = "copies of one prompt share a step " * 4
        assert len(_copies(f.url, 4) | set(_complete(f.url, [prompt] * 4))) == 2  # one answer each


@pytest.mark.parametrize("bug,differs", [("none", False), ("warm-cache", True)])
def test_warm_cache_hit_computes_differently_only_on_the_buggy_fake(bug, differs):
    with FakeEngine(bug) as f:
        cold, warm = _cold_warm(f.url)
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    lp = [d["choices"][0]["logprobs"]["token_logprobs"] for d in (cold, warm)]
    assert (lp[0] != lp[1]) is differs


def test_stream_carries_the_same_ids_and_logprob_bits(clean):
    want = _complete(clean.url, [PROBE, "second prompt"], 12)
    r = requests.post(clean.url + "/v1/completions", json={"prompt": [PROBE, "second prompt"], "max_tokens": 12,
                                                           "temperature": 0, "logprobs": 1, "stream": True},
                      stream=True, timeout=60)  # fmt: skip
    ids: dict[int, list] = {0: [], 1: []}
    lps: dict[int, list] = {0: [], 1: []}
    for line in r.iter_lines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            ch = json.loads(line[6:])["choices"][0]
            ids[ch["index"]] += ch["token_ids"]
            lps[ch["index"]] += ch["logprobs"]["token_logprobs"]
    assert [(tuple(ids[i]), tuple(lps[i])) for i in (0, 1)] == want


def test_echo_rescoring_equals_decode_on_the_clean_twin(clean):
    gen = requests.post(clean.url + "/v1/completions", json={"prompt": PROBE, "max_tokens": 8, "temperature": 0,
                                                             "logprobs": 0}, timeout=60).json()["choices"][0]  # fmt: skip
    full = gen["prompt_token_ids"] + gen["token_ids"]
    re = requests.post(clean.url + "/v1/completions", json={"prompt": full, "max_tokens": 1, "temperature": 0,
                                                            "logprobs": 1, "echo": True}, timeout=60).json()  # fmt: skip
    k = len(gen["prompt_token_ids"])
    assert re["choices"][0]["logprobs"]["token_logprobs"][k : k + 8] == gen["logprobs"]["token_logprobs"]


def test_chat_and_sglang_generate_answer(clean):
    chat = requests.post(clean.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                   "max_tokens": 5, "temperature": 0, "logprobs": True},
                         timeout=60).json()  # fmt: skip
    assert len(chat["choices"][0]["logprobs"]["content"]) == 5
    gen = requests.post(clean.url + "/generate", json={"input_ids": [72, 105], "sampling_params": {"max_new_tokens": 4,
                        "temperature": 0}, "return_logprob": True}, timeout=60).json()  # fmt: skip
    assert len(gen["output_ids"]) == 4 and len(gen["meta_info"]["output_token_logprobs"]) == 4


def test_bad_request_gets_a_400_naming_what_was_wrong(clean):
    r = requests.post(clean.url + "/v1/completions", json={"prompt": [300, 2], "max_tokens": 3}, timeout=10)
    assert r.status_code == 400 and "0..255" in r.json()["error"]["message"]


def test_cli_serves_until_terminated():
    proc = subprocess.Popen([sys.executable, "-m", "pytest_invariance.fakes", "--bug", "padding"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = proc.stdout.readline().strip()
        assert requests.get(url + "/v1/models", timeout=10).json()["data"][0]["owned_by"] == "fake-padding"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def _beside(url: str, late: dict, mt: int = 40) -> tuple[tuple, tuple]:
    """The probe (greedy, ``mt`` tokens, streamed) with another request sent once the probe's first
    token has arrived, so it lands mid-decode however loaded the machine is; the probe's ids and
    logprobs, as ``_complete`` gives them."""
    body = {"prompt": PROBE, "max_tokens": mt, "temperature": 0, "logprobs": 1, "stream": True}
    ids, lps, side = [], [], None
    with ThreadPoolExecutor(1) as pool, requests.post(url + "/v1/completions", json=body, stream=True, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                ch = json.loads(line[6:])["choices"][0]
                ids += ch["token_ids"]
                lps += ch["logprobs"]["token_logprobs"]
                if side is None:
                    other = {"prompt": "late arrival", "max_tokens": 5, "temperature": 0, **late}
                    side = pool.submit(requests.post, url + "/v1/completions", json=other, timeout=60)
        side.result().raise_for_status()
    return tuple(ids), tuple(lps)


def test_token_budget_changes_every_row_only_over_the_steps_budget():
    with FakeEngine("token-budget", token_budget=200) as f:
        alone = _complete(f.url, PROBE)[0]
        assert _copies(f.url, 4) == {alone}  # 4 x (19 + 24) tokens: under the budget
        assert alone not in _copies(f.url, 5) and len(_copies(f.url, 5)) == 1  # over it by the last steps
        assert _complete(f.url, [PROBE, "z" * 200])[0] != alone  # one long neighbour is enough


def test_large_batch_changes_rows_only_from_its_threshold():
    with FakeEngine("large-batch", batch_threshold=12) as f:
        alone = _complete(f.url, PROBE, 8)[0]
        assert set(_complete(f.url, [PROBE] * 11, 8)) == {alone}
        got = set(_complete(f.url, [PROBE] * 12, 8))
        assert len(got) == 1 and got != {alone}


def test_row_index_changes_rows_from_their_index_on():
    with FakeEngine("row-index", row_from=2) as f:
        alone = _complete(f.url, PROBE)[0]
        rows = _complete(f.url, [PROBE] * 4)
        assert rows[:2] == [alone, alone] and alone not in rows[2:] and rows[2] != rows[3]


def test_mixed_step_changes_a_decode_only_beside_another_prefill():
    with FakeEngine("mixed-step") as f:
        alone = _complete(f.url, PROBE, 40)[0]
        assert set(_complete(f.url, [PROBE, "one list request", "prefills together"], 40)[:1]) == {alone}
        assert _beside(f.url, {}) != alone
        assert f.stats()["perturbed_rows"] >= 1


@pytest.mark.parametrize("trigger,late", [("top-logprobs", {"logprobs": 5}), ("n", {"n": 2}), ("stream", {"stream": True})])
def test_sampler_path_changes_rows_beside_another_requests_trigger(trigger, late):
    with FakeEngine("sampler-path", sampler_trigger=trigger) as f:
        alone = _complete(f.url, PROBE, 40)[0]
        assert _beside(f.url, {"logprobs": 1}) == alone  # a plain greedy neighbour: clean
        if trigger != "stream":  # the trigger within the probe's own request: one request, clean
            assert _complete(f.url, [PROBE, "same request"], 40, **late)[0] == _complete(f.url, PROBE, 40, **late)[0]
        assert _beside(f.url, late) != alone


def test_clean_twin_ignores_what_the_new_bugs_trigger_on(clean):
    alone = _complete(clean.url, PROBE, 40)[0]
    for late in ({}, {"logprobs": 5, "n": 2}, {"stream": True}):
        assert _beside(clean.url, late) == alone
    assert set(_complete(clean.url, [PROBE] * 50, 40)) == {alone}


def _stream_and_hang_up(url: str, prompt: str, chunks: int) -> None:
    body = {"prompt": prompt, "max_tokens": 64, "temperature": 0, "stream": True}
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=60) as r:
        for i, _ in enumerate(x for x in r.iter_lines() if x.startswith(b"data: ")):
            if i + 1 >= chunks:
                return


@pytest.mark.parametrize("after", ["finish", "abort"])
def test_stale_slot_shows_only_after_another_request_left_its_slot(after):
    with FakeEngine("stale-slot", stale_after=after) as f:
        first = _complete(f.url, PROBE)[0]  # slot 0 fresh
        _complete(f.url, "x" * 60, 8)  # a longer request finishes in slot 0
        second = _complete(f.url, PROBE)[0]
        assert (second != first) is (after == "finish")
        _stream_and_hang_up(f.url, "y" * 60, 2)  # a client hangs up: its slot is freed as it was
        time.sleep(0.1)
        assert _complete(f.url, PROBE)[0] != first


def test_long_context_rows_change_with_the_batch_and_short_rows_never():
    with FakeEngine("long-context", split_kv_tokens=100) as f:
        long = "w" * 120
        alone = _complete(f.url, long, 8)[0]
        assert _complete(f.url, [long, "short"], 8)[0] != alone  # 4 splits, not 8
        assert set(_complete(f.url, [long] * 8, 8)) == set(_complete(f.url, [long] * 9, 8))  # one split from 8
        short = _complete(f.url, PROBE, 8)[0]
        assert set(_complete(f.url, [PROBE] * 3, 8)) == {short}
