"""Schema fuzz of the three generation routes: hypothesis bodies built from each route's own field
names with hostile and plausible values (wrong types, huge and negative numbers, NaN, lone
surrogates, deep nesting, empty and nested lists). The server must answer every one with a 2xx or
a 4xx, never a 500, and within a bound (no hang)."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
requests = pytest.importorskip("requests")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pytest_invariance.engine.config import EngineConfig, ModelConfig  # noqa: E402
from pytest_invariance.engine.protocol import ChatCompletionRequest, CompletionRequest, GenerateRequest  # noqa: E402
from pytest_invariance.engine.server import ServerThread, create_app  # noqa: E402

TINY = dict(hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=64, dtype="float32")
EXAMPLES = int(os.environ.get("INVARIANCE_FUZZ_EXAMPLES", "120"))  # per route; three routes
PER_REQUEST_S = 20.0

HOSTILE_TEXT = ["", "a", "hello world", "\ud800", "x\udfffy", "\x00", "é" * 3, "token_id:3", " " * 50]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 8), st.sampled_from([-(2**63), 2**64, 10**30, 0, 1]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e-320, 5e-324, -0.0, 1e308]),
    st.sampled_from(HOSTILE_TEXT), st.text(max_size=6),
)  # fmt: skip
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                      st.dictionaries(st.sampled_from(["role", "content", "type", "text", "x"]), inner, max_size=3)),
                      max_leaves=12)  # fmt: skip
deep = st.integers(30, 3000).map(lambda n: json.loads("[" * min(n, 900) + "]" * min(n, 900)))


def _body(fields: list[str], required: dict) -> st.SearchStrategy:
    plausible = {
        "max_tokens": st.integers(-2, 4), "max_new_tokens": st.integers(-2, 4), "n": st.integers(-1, 5),
        "temperature": st.sampled_from([0, 0.0, 1.0, 1e-320, -1, 1e9, float("nan")]),
        "logprobs": st.one_of(st.booleans(), st.integers(-1, 30)), "top_logprobs": st.integers(-1, 30),
        "stop_token_ids": st.lists(st.integers(-5, 2**40), max_size=5),
        "prompt": st.one_of(st.sampled_from(HOSTILE_TEXT), st.lists(st.integers(-3, 300), max_size=6),
                            st.lists(st.sampled_from(HOSTILE_TEXT), max_size=3)),
        "input_ids": st.one_of(st.lists(st.integers(-3, 300), max_size=6), st.lists(st.lists(st.integers(0, 300), max_size=4), max_size=3)),
        "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "bot"]),
                                                    "content": st.one_of(st.sampled_from(HOSTILE_TEXT), values)}), max_size=3),
    }  # fmt: skip
    field_value = {f: st.one_of(plausible.get(f, values), values, deep) for f in fields}
    optional = st.fixed_dictionaries({}, optional=field_value)
    return st.tuples(st.fixed_dictionaries(required), optional).map(lambda t: {**t[0], **t[1]})


ROUTES = {
    "/v1/completions": _body(list(CompletionRequest.model_fields), {"prompt": st.sampled_from(["hi", "a b"]),
                             "max_tokens": st.integers(0, 3)}),
    "/v1/chat/completions": _body(list(ChatCompletionRequest.model_fields),
                                  {"messages": st.just([{"role": "user", "content": "hi"}]), "max_tokens": st.integers(0, 3)}),
    "/generate": _body(list(GenerateRequest.model_fields) + ["sampling_params"], {"text": st.just("hi"),
                       "sampling_params": st.fixed_dictionaries({"max_new_tokens": st.integers(0, 3)})}),
}  # fmt: skip
STATUSES: Counter = Counter()


@pytest.fixture(scope="module")
def base() -> str:
    cfg = EngineConfig(model=ModelConfig(**TINY, max_position=128), max_num_seqs=8)
    with ServerThread(create_app(cfg, max_queue=16, max_n=4, max_prompts=8)) as url:
        yield url


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_fuzzed_bodies_never_500(base: str, path: str) -> None:
    session = requests.Session()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(ROUTES[path])
    def one(body: dict) -> None:
        raw = json.dumps(body, allow_nan=True).encode()
        r = session.post(base + path, data=raw, headers={"Content-Type": "application/json"}, timeout=PER_REQUEST_S)
        STATUSES[(path, r.status_code)] += 1
        assert r.status_code < 500 or r.status_code == 503, (r.status_code, r.text[:300], raw[:300])
        if r.status_code >= 400:
            assert r.json()["error"]["message"]

    one()
    print(f"{path}: {sorted((s, n) for (p, s), n in STATUSES.items() if p == path)}")
