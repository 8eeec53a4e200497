"""The bundled engine's HTTP server against a real (tiny) engine: routes, formats, bad input, auth.

Each route is driven by the official ``openai`` client where it applies and by raw ``requests``,
streaming and not. The tiny fp32 model keeps the module fast; formats do not depend on size.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
requests = pytest.importorskip("requests")

from pytest_invariance.engine.config import EngineConfig, ModelConfig  # noqa: E402
from pytest_invariance.engine.server import ServerThread, create_app  # noqa: E402
from pytest_invariance.engine.server_common import render_chat  # noqa: E402
from pytest_invariance.engine.tokenizer import ByteTokenizer  # noqa: E402

TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, dtype="float32")
CONTEXT = 1024
TOK = ByteTokenizer()


def tiny_config(**kw: object) -> EngineConfig:
    return EngineConfig(model=ModelConfig(**TINY, max_position=CONTEXT), max_num_seqs=8, **kw)


@pytest.fixture(scope="module")
def base() -> str:
    app = create_app(tiny_config(), max_queue=32, max_n=4)
    with ServerThread(app) as url:
        yield url


@pytest.fixture()
def client(base: str) -> openai.OpenAI:
    with openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def sse_events(resp: requests.Response) -> list:
    """Parse an SSE body; the last event must be [DONE]."""
    events = [line[len("data: ") :] for line in resp.text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def metric(base: str, name: str) -> float:
    for line in requests.get(base + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


# --- OpenAI completions --------------------------------------------------------------------------


def test_completions_openai_client_stream_matches_non_stream(client: openai.OpenAI) -> None:
    full = client.completions.create(model="x", prompt="Hello there", max_tokens=12, temperature=0)
    choice = full.choices[0]
    ids = choice.model_extra["token_ids"]
    assert len(ids) == full.usage.completion_tokens and 1 <= len(ids) <= 12
    assert choice.model_extra["prompt_token_ids"] == TOK.encode("Hello there")
    assert choice.text == TOK.decode(ids)
    assert choice.finish_reason in ("length", "stop")
    assert full.usage.prompt_tokens == len("Hello there")

    parts, streamed_ids, reasons = [], [], []
    for chunk in client.completions.create(
        model="x", prompt="Hello there", max_tokens=12, temperature=0, stream=True
    ):
        c = chunk.choices[0]
        parts.append(c.text)
        streamed_ids += c.model_extra["token_ids"]
        reasons.append(c.finish_reason)
    assert "".join(parts) == choice.text
    assert streamed_ids == ids
    assert reasons[-1] == choice.finish_reason and all(r is None for r in reasons[:-1])


def test_completions_raw_token_prompts_n_and_seed(base: str) -> None:
    body = {"prompt": [[72, 105], [1, 2, 3]], "max_tokens": 6, "temperature": 1.0, "seed": 7, "n": 2}
    r1 = requests.post(base + "/v1/completions", json=body, timeout=60)
    r2 = requests.post(base + "/v1/completions", json=body, timeout=60)
    assert r1.status_code == 200, r1.text
    c1, c2 = r1.json()["choices"], r2.json()["choices"]
    assert [c["index"] for c in c1] == [0, 1, 2, 3]
    assert [c["prompt_token_ids"] for c in c1] == [[72, 105], [72, 105], [1, 2, 3], [1, 2, 3]]
    assert [c["token_ids"] for c in c1] == [c["token_ids"] for c in c2]  # same seed, same draws
    assert c1[0]["token_ids"] != c1[1]["token_ids"]  # the n samples of one prompt get distinct seeds
    assert r1.json()["usage"]["prompt_tokens"] == 5

    events = sse_events(requests.post(base + "/v1/completions", json={**body, "stream": True}, timeout=60))
    by_index: dict[int, list[int]] = {}
    for e in events:
        for c in e["choices"]:
            by_index.setdefault(c["index"], []).extend(c["token_ids"])
    assert [by_index[i] for i in range(4)] == [c["token_ids"] for c in c1]


def test_completions_logprobs_echo_and_prompt_logprobs(base: str) -> None:
    body = {
        "prompt": "abcd",
        "max_tokens": 3,
        "temperature": 0,
        "logprobs": 2,
        "echo": True,
        "prompt_logprobs": 1,
    }
    r = requests.post(base + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    lp = c["logprobs"]
    assert c["text"].startswith("abcd")
    assert len(lp["tokens"]) == 4 + len(c["token_ids"])
    assert lp["token_logprobs"][0] is None and all(isinstance(x, float) for x in lp["token_logprobs"][1:])
    assert lp["top_logprobs"][0] is None and all(1 <= len(t) <= 2 for t in lp["top_logprobs"][1:])
    assert lp["text_offset"][:4] == [0, 1, 2, 3]
    assert c["prompt_logprobs"][0] is None
    for pos, entry in enumerate(c["prompt_logprobs"][1:], start=1):
        assert str(c["prompt_token_ids"][pos]) in entry
    # greedy: the chosen token is the top-1 alternative, with the same logprob bits
    for tok_lp, top in zip(lp["token_logprobs"][4:], lp["top_logprobs"][4:], strict=True):
        assert tok_lp == max(top.values())


def test_completions_token_names_as_ids(base: str) -> None:
    body = {
        "prompt": [65, 66],
        "max_tokens": 2,
        "temperature": 0,
        "logprobs": 0,
        "return_tokens_as_token_ids": True,
    }
    c = requests.post(base + "/v1/completions", json=body, timeout=60).json()["choices"][0]
    assert c["logprobs"]["tokens"] == [f"token_id:{t}" for t in c["token_ids"]]


def test_openai_client_top_logprobs_keep_every_candidate_as_token_ids(client: openai.OpenAI) -> None:
    """Text keys collide (bytes 0x80-0xFF alone all decode to U+FFFD), so the text-keyed dict drops
    candidates, keeping the higher logprob; ``return_tokens_as_token_ids`` keeps all k, best first,
    and the greedy token is the best of them with the same bits."""
    k = 20
    kw = dict(model="x", prompt=[200, 201, 202], max_tokens=6, temperature=0, logprobs=k)
    as_text = client.completions.create(**kw).choices[0].logprobs
    as_ids = client.completions.create(**kw, extra_body={"return_tokens_as_token_ids": True}).choices[0]
    lp = as_ids.logprobs
    assert min(len(top) for top in as_text.top_logprobs) < k  # the lossy form really lost some
    ids = as_ids.model_extra["token_ids"]
    for tok, tok_lp, top, text_top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, as_text.top_logprobs,
                                          strict=True):  # fmt: skip
        assert len(top) == k and all(key.startswith("token_id:") for key in top)
        assert list(top.values()) == sorted(top.values(), reverse=True)
        assert next(iter(top)) == tok and top[tok] == tok_lp  # greedy: the best candidate, same bits
        assert max(text_top.values()) == tok_lp  # a collision never hides the greedy token's logprob
    assert lp.tokens == [f"token_id:{t}" for t in ids]


def test_chat_token_names_as_ids(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(
        model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0,
        logprobs=True, top_logprobs=5, extra_body={"return_tokens_as_token_ids": True},
    )  # fmt: skip
    choice = out.choices[0]
    assert [e.token for e in choice.logprobs.content] == [f"token_id:{t}" for t in choice.model_extra["token_ids"]]
    assert all(len({t.token for t in e.top_logprobs}) == 5 for e in choice.logprobs.content)


# --- chat ----------------------------------------------------------------------------------------


def test_chat_openai_client_stream_and_logprobs(client: openai.OpenAI) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    full = client.chat.completions.create(
        model="x", messages=messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2
    )
    choice = full.choices[0]
    assert choice.message.role == "assistant"
    ids = choice.model_extra["token_ids"]
    assert choice.message.content == TOK.decode(ids)
    assert [e.logprob for e in choice.logprobs.content] == [
        max(t.logprob for t in e.top_logprobs) for e in choice.logprobs.content
    ]
    assert all(
        len(e.top_logprobs) == 2 and e.bytes == [t]
        for e, t in zip(choice.logprobs.content, ids, strict=False)
    )
    from pytest_invariance.engine.protocol import ChatMessage

    rendered = render_chat([ChatMessage(**m) for m in messages], True)
    assert rendered == "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n"
    assert full.model_extra["prompt_token_ids"] == TOK.encode(rendered)

    text, streamed = "", []
    stream = client.chat.completions.create(
        model="x",
        messages=messages,
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = None
    for chunk in stream:
        for c in chunk.choices:
            text += c.delta.content or ""
            streamed += c.model_extra.get("token_ids") or []
        usage = chunk.usage or usage
    assert text == choice.message.content and streamed == ids
    assert usage.completion_tokens == len(ids)


def test_stop_string_cuts_text_and_aborts(base: str) -> None:
    body = {"prompt": "stop test", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    free = requests.post(base + "/v1/completions", json=body, timeout=60).json()["choices"][0]
    text = free["text"]
    stop = next((text[i : i + 2] for i in range(3, len(text) - 2) if "\ufffd" not in text[i : i + 2]), None)
    if stop is None:
        pytest.fail(f"greedy output {text!r} has no usable 2-character stop string")
    cut = text[: text.index(stop)]
    r = requests.post(base + "/v1/completions", json={**body, "stop": [stop]}, timeout=60).json()["choices"][
        0
    ]
    assert r["text"] == cut and r["finish_reason"] == "stop" and r["stop_reason"] == stop
    assert len(r["token_ids"]) < len(free["token_ids"])
    events = sse_events(
        requests.post(base + "/v1/completions", json={**body, "stop": stop, "stream": True}, timeout=60)
    )
    assert "".join(c["text"] for e in events for c in e["choices"]) == cut


# --- SGLang /generate ----------------------------------------------------------------------------


def test_generate_single_list_logprobs_and_stream(base: str) -> None:
    sp = {"max_new_tokens": 5, "temperature": 0}
    single = requests.post(base + "/generate", json={"text": "xyz", "sampling_params": sp}, timeout=60).json()
    assert set(single) >= {"text", "output_ids", "meta_info"}
    assert single["meta_info"]["prompt_tokens"] == 3
    assert single["meta_info"]["completion_tokens"] == len(single["output_ids"])
    assert single["meta_info"]["finish_reason"]["type"] in ("length", "stop")

    prompts = [TOK.encode("xyz"), [1, 2, 3, 4], [200]]
    body = {
        "input_ids": prompts,
        "sampling_params": sp,
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 2,
        "return_text_in_logprobs": True,
    }
    batch = requests.post(base + "/generate", json=body, timeout=60).json()
    assert isinstance(batch, list) and len(batch) == 3
    assert batch[0]["output_ids"] == single["output_ids"]
    for item, ids in zip(batch, prompts, strict=True):
        meta = item["meta_info"]
        inp, outp = meta["input_token_logprobs"], meta["output_token_logprobs"]
        assert [t[1] for t in inp] == ids and inp[0][0] is None
        assert all(isinstance(t[0], float) for t in inp[1:])
        assert [t[1] for t in outp] == item["output_ids"]
        assert all(isinstance(t[0], float) and isinstance(t[2], str) for t in outp)
        assert len(meta["output_top_logprobs"]) == len(outp)
        assert all(len(top) == 2 for top in meta["output_top_logprobs"])

    events = sse_events(requests.post(base + "/generate", json={**body, "stream": True}, timeout=60))
    final: dict[int, dict] = {}
    for e in events:
        final[e["index"]] = e  # cumulative: the last event per index is the whole result
    for i, item in enumerate(batch):
        assert final[i]["output_ids"] == item["output_ids"]
        assert final[i]["text"] == item["text"]
        assert final[i]["meta_info"]["output_token_logprobs"] == item["meta_info"]["output_token_logprobs"]


def test_generate_n_and_per_item_params(base: str) -> None:
    body = {
        "text": ["a", "b"],
        "sampling_params": [
            {"max_new_tokens": 2, "temperature": 0.8, "sampling_seed": 3, "n": 2},
            {"max_new_tokens": 3, "temperature": 0, "n": 2},
        ],
    }
    out = requests.post(base + "/generate", json=body, timeout=60).json()
    assert len(out) == 4
    assert [len(o["output_ids"]) <= m for o, m in zip(out, [2, 2, 3, 3], strict=True)] == [True] * 4
    assert out[2]["output_ids"] == out[3]["output_ids"]  # greedy samples agree


# --- cached tokens -------------------------------------------------------------------------------


def test_cached_tokens_reach_the_openai_client_and_generate() -> None:
    """With the prefix cache on, a repeat of a prompt reports the cached prefix where vLLM and SGLang
    do: ``usage.prompt_tokens_details.cached_tokens`` (parsed by the official client) and
    ``meta_info.cached_tokens``; a cold prompt reports 0. Without the cache there is no hit to report."""
    prompt = "a prefix long enough for several KV blocks " * 2  # 86 tokens: 5 full blocks of 16
    for cache, warm_expected in ((True, 80), (False, 0)):
        with ServerThread(create_app(tiny_config(enable_prefix_cache=cache))) as url:
            with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60) as c:
                cold, warm = (
                    c.completions.create(model="x", prompt=prompt, max_tokens=1, temperature=0).usage
                    for _ in range(2)
                )
            gen = {"text": prompt, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
            meta = requests.post(url + "/generate", json=gen, timeout=60).json()["meta_info"]
        assert cold.prompt_tokens == warm.prompt_tokens == len(prompt)
        assert cold.prompt_tokens_details.cached_tokens == 0
        assert warm.prompt_tokens_details.cached_tokens == warm_expected, f"prefix cache {cache}"
        assert meta["cached_tokens"] == warm_expected


# --- info routes ---------------------------------------------------------------------------------


def test_info_routes(base: str, client: openai.OpenAI) -> None:
    assert requests.get(base + "/health", timeout=10).status_code == 200
    models = client.models.list()
    assert models.data[0].id == "bundled-demo" and models.data[0].model_extra["max_model_len"] == CONTEXT
    for path in ("/server_info", "/get_server_info"):
        info = requests.get(base + path, timeout=10).json()
        for key in ("model", "mode", "dtype", "device", "batch_invariant", "max_num_seqs", "chunk_size",
                    "enable_prefix_cache", "shared_rng", "split_kv", "kernels", "enable_deterministic_inference"):  # fmt: skip
            assert key in info, key
        assert info["mode"] == "default" and info["enable_deterministic_inference"] is False
        assert info["dtype"] == "float32" and info["device"] == "cpu"
    assert requests.get(base + "/model_info", timeout=10).json()["is_generation"] is True
    r = requests.post(base + "/flush_cache?timeout=10", timeout=30)
    assert r.status_code == 200
    assert requests.get(base + "/flush_cache?timeout=x", timeout=10).status_code == 400
    # this test's own request, so the step counter is not left to whichever tests ran first on this worker
    done = requests.post(base + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
    assert done.status_code == 200, done.text[:300]
    text = requests.get(base + "/metrics", timeout=10).text
    assert "# TYPE invariance_engine_batch_size histogram" in text
    assert metric(base, "invariance_engine_steps_total") > 0


# --- bad input -----------------------------------------------------------------------------------

BAD = [
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": ', "body"),
    ("/v1/completions", b'{"prompt": "hi", "temperature": NaN}', "body"),
    ("/v1/completions", b"[1, 2]", "body"),
    ("/v1/completions", b"", "body"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": "5"}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": CONTEXT}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": True}, "max_tokens"),
    ("/v1/completions", {"prompt": ""}, "prompt"),
    ("/v1/completions", {"prompt": []}, "prompt"),
    ("/v1/completions", {"prompt": [1, 259]}, "prompt"),
    ("/v1/completions", {"prompt": [[1], [-1]]}, "prompt.1"),
    ("/v1/completions", {"prompt": [1] * CONTEXT}, "prompt"),
    ("/v1/completions", {"prompt": 42}, "prompt"),
    ("/v1/completions", {"prompt": "hi", "n": 5}, "n"),
    ("/v1/completions", {"prompt": "hi", "n": 0}, "n"),
    ("/v1/completions", {"prompt": "hi", "temperature": -1}, "temperature"),
    ("/v1/completions", {"prompt": "hi", "top_p": 0}, "top_p"),
    ("/v1/completions", {"prompt": "hi", "logprobs": 21}, "logprobs"),
    ("/v1/completions", {"prompt": "hi", "seed": 2**64}, "seed"),
    ("/v1/completions", {"prompt": "hi", "stop": [""]}, "stop"),
    ("/v1/completions", {"prompt": "hi", "presence_penalty": 0.5}, "presence_penalty"),
    ("/v1/chat/completions", {"messages": []}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": -3},
        "max_tokens",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
        "top_logprobs",
    ),
    ("/generate", {"text": "a", "input_ids": [1]}, "text"),
    ("/generate", {}, "text"),
    ("/generate", {"input_ids": [[1], []]}, "input_ids.1"),
    ("/generate", {"input_ids": [300]}, "input_ids"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 0}}, "sampling_params.max_new_tokens"),
    ("/generate", {"text": ["a", "b"], "sampling_params": [{}]}, "sampling_params"),
    ("/generate", {"text": "a", "sampling_params": {"n": 99}}, "sampling_params.n"),
    ("/generate", {"text": "abc", "return_logprob": True, "logprob_start_len": 3}, "logprob_start_len"),
]


@pytest.mark.parametrize("path,body,param", BAD, ids=[f"{p}:{i}" for i, (p, _, _) in enumerate(BAD)])
def test_bad_input_is_400_naming_the_field(base: str, path: str, body: object, param: str) -> None:
    if isinstance(body, bytes):
        r = requests.post(base + path, data=body, headers={"Content-Type": "application/json"}, timeout=30)
    else:
        r = requests.post(base + path, json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"]
    assert err["param"] == param, err
    assert set(err) == {"message", "type", "param", "code"}


def test_bad_input_through_openai_client(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="x", prompt="hi", max_tokens=CONTEXT)
    assert e.value.body["param"] == "max_tokens"


def test_unknown_route_and_method(base: str) -> None:
    r = requests.get(base + "/v1/nothing", timeout=10)
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"
    assert requests.get(base + "/v1/completions", timeout=10).status_code == 405


def test_no_route_reads_files(base: str) -> None:
    """Paths that look like files are just unknown routes; no parameter names a path."""
    for path in ("/../../etc/passwd", "/static/../pyproject.toml", "/docs", "/openapi.json"):
        assert requests.get(base + path, timeout=10).status_code == 404


# --- client disconnect, overload -----------------------------------------------------------------


def _wait_idle(base: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while metric(base, "invariance_engine_inflight") > 0:
        assert time.monotonic() < deadline, "requests still in flight"
        time.sleep(0.05)


def test_disconnect_aborts_request(base: str) -> None:
    _wait_idle(base)
    before = (
        metric(base, 'invariance_engine_requests_total{outcome="aborted"}')
        if "aborted" in requests.get(base + "/metrics", timeout=10).text
        else 0.0
    )
    body = {"prompt": "x", "max_tokens": CONTEXT - 2, "temperature": 0, "ignore_eos": True}
    with requests.post(base + "/v1/completions", json={**body, "stream": True}, stream=True, timeout=60) as r:
        lines = r.iter_lines()
        next(lines)  # the request is running; leaving the block closes the connection
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(base + "/v1/completions", json=body, timeout=0.5)  # non-streaming, client gives up
    t0 = time.monotonic()
    _wait_idle(base)
    assert time.monotonic() - t0 < 5, "aborts should free the engine long before the requests could finish"
    after = metric(base, 'invariance_engine_requests_total{outcome="aborted"}')
    assert after - before == 2


def test_full_queue_is_503_with_retry_after() -> None:
    app = create_app(dataclasses.replace(tiny_config(), max_num_seqs=1), max_queue=0)
    with ServerThread(app) as url:
        body = {
            "prompt": "x",
            "max_tokens": CONTEXT - 2,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        with requests.post(url + "/v1/completions", json=body, stream=True, timeout=60) as r:
            lines = r.iter_lines()  # keep the iterator: dropping it closes the connection
            next(lines)
            busy = requests.post(url + "/v1/completions", json={"prompt": "y", "max_tokens": 1}, timeout=30)
            assert busy.status_code == 503
            assert int(busy.headers["Retry-After"]) >= 1 and int(busy.headers["retry-after-ms"]) > 0
            assert busy.json()["error"]["code"] == "overloaded"
            assert requests.get(url + "/health", timeout=10).status_code == 200


# --- auth ----------------------------------------------------------------------------------------


def test_api_key_on_every_route_but_health() -> None:
    app = create_app(tiny_config(), api_key="s3cret", max_queue=4)
    with ServerThread(app) as url:
        assert requests.get(url + "/health", timeout=10).status_code == 200
        for method, path in [("post", "/v1/completions"), ("post", "/v1/chat/completions"), ("post", "/generate"),
                             ("get", "/v1/models"), ("get", "/server_info"), ("get", "/get_server_info"),
                             ("get", "/metrics"), ("post", "/flush_cache"), ("get", "/model_info"),
                             ("get", "/nonexistent")]:  # fmt: skip
            r = getattr(requests, method)(url + path, json={"prompt": "a"}, timeout=10)
            assert r.status_code == 401, path
            assert r.json()["error"]["code"] == "invalid_api_key"
            bad = getattr(requests, method)(url + path, headers={"Authorization": "Bearer nope"}, timeout=10)
            assert bad.status_code == 401, path
        with openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0) as ok:
            assert ok.completions.create(model="x", prompt="a", max_tokens=1, temperature=0).choices
        with openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0) as wrong:
            with pytest.raises(openai.AuthenticationError):
                wrong.completions.create(model="x", prompt="a", max_tokens=1)
