"""The request parameters a neighbour may carry, and which of them the target accepts.

Every field a client may send in the OpenAI completions and chat schemas is listed, with the
common vLLM / SGLang extras marked as such; each has a hypothesis strategy and one probing value.
Many servers refuse some of them (the bundled engine refuses penalties and ``logit_bias`` rather
than ignoring them), and a refused neighbour never co-runs, so a fuzz run first sends each
parameter once, alone, and generates only those the server answered with 200. What it refused is
recorded beside the verdict: a parameter the fuzzer could not send is one it did not test.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import requests
from hypothesis import strategies as st

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"


@dataclass(frozen=True)
class Param:
    """One request field: where it is valid, how to generate it, one value to probe it with."""

    name: str
    routes: tuple[str, ...]
    strategy: st.SearchStrategy
    probe: Any
    extra: bool = False  # a vLLM / SGLang extension, not in the OpenAI schema


_BOTH = (COMPLETIONS, CHAT)
_STOP = st.one_of(st.sampled_from(["\n", "e", "the"]), st.lists(st.sampled_from(["\n", "a", "o", " s"]), min_size=1, max_size=3))
_BIAS = st.dictionaries(st.integers(32, 126).map(str), st.integers(-100, 100).map(float), min_size=1, max_size=3)
_TOOL = {"type": "function", "function": {"name": "lookup", "description": "look a word up",
                                          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}  # fmt: skip

PARAMS: tuple[Param, ...] = (
    # OpenAI, both routes
    Param("temperature", _BOTH, st.sampled_from([0.0, 0.7, 1.0, 1.5]), 0.8),
    Param("top_p", _BOTH, st.sampled_from([1.0, 0.9, 0.5]), 0.9),
    Param("seed", _BOTH, st.integers(0, 2**31 - 1), 7),
    Param("stop", _BOTH, _STOP, ["\n"]),
    Param("presence_penalty", _BOTH, st.sampled_from([0.5, -0.5, 2.0]), 0.5),
    Param("frequency_penalty", _BOTH, st.sampled_from([0.5, -0.5, 2.0]), 0.5),
    Param("logit_bias", _BOTH, _BIAS, {"65": 5.0}),
    Param("user", _BOTH, st.sampled_from(["fuzz", "a-user"]), "fuzz"),
    Param("stream_options", _BOTH, st.just({"include_usage": True}), {"include_usage": True}),
    # OpenAI completions only
    Param("logprobs", (COMPLETIONS,), st.integers(0, 5), 2),
    Param("echo", (COMPLETIONS,), st.booleans(), True),
    Param("suffix", (COMPLETIONS,), st.sampled_from(["!", " end"]), "!"),
    Param("best_of", (COMPLETIONS,), st.integers(1, 3), 2),
    # OpenAI chat only
    Param("logprobs_chat", (CHAT,), st.integers(0, 5), 2),  # logprobs: true + top_logprobs: k
    Param("max_completion_tokens", (CHAT,), st.integers(1, 24), 4),
    Param("response_format", (CHAT,), st.sampled_from([{"type": "text"}, {"type": "json_object"}]), {"type": "json_object"}),
    Param("tools", (CHAT,), st.just([_TOOL]), [_TOOL]),
    Param("tool_choice", (CHAT,), st.sampled_from(["none", "auto"]), "none"),
    Param("parallel_tool_calls", (CHAT,), st.booleans(), False),
    Param("store", (CHAT,), st.booleans(), False),
    Param("metadata", (CHAT,), st.just({"fuzz": "1"}), {"fuzz": "1"}),
    Param("service_tier", (CHAT,), st.sampled_from(["auto", "default"]), "auto"),
    Param("reasoning_effort", (CHAT,), st.sampled_from(["low", "medium", "high"]), "low"),
    Param("modalities", (CHAT,), st.just(["text"]), ["text"]),
    # vLLM / SGLang extensions
    Param("top_k", _BOTH, st.sampled_from([1, 5, 50]), 5, extra=True),
    Param("min_p", _BOTH, st.sampled_from([0.05, 0.2]), 0.05, extra=True),
    Param("repetition_penalty", _BOTH, st.sampled_from([1.1, 1.5]), 1.1, extra=True),
    Param("min_tokens", _BOTH, st.integers(1, 8), 2, extra=True),
    Param("ignore_eos", _BOTH, st.booleans(), True, extra=True),
    Param("stop_token_ids", _BOTH, st.lists(st.integers(32, 126), min_size=1, max_size=2), [10], extra=True),
    Param("prompt_logprobs", _BOTH, st.integers(0, 3), 1, extra=True),
    Param("skip_special_tokens", _BOTH, st.booleans(), False, extra=True),
    Param("return_token_ids", _BOTH, st.booleans(), True, extra=True),
)
BY_NAME = {p.name: p for p in PARAMS}


def apply(body: dict, name: str, value: Any) -> None:
    """Put one generated parameter into a request body (chat logprobs are two fields)."""
    if name == "logprobs_chat":
        body["logprobs"] = True
        body["top_logprobs"] = value
    elif name == "tool_choice" and "tools" not in body:
        body["tools"] = [_TOOL]
        body["tool_choice"] = value
    elif name == "stream_options":
        body["stream"] = True
        body["stream_options"] = value
    elif name == "best_of":
        body["best_of"] = max(value, body.get("n", 1))
    else:
        body[name] = value


@dataclass
class Accepted:
    """What the target took: the routes that answer at all, and per route the parameters it accepted."""

    routes: dict[str, tuple[str, ...]]
    refused: dict[str, dict[str, str]]  # route -> parameter -> why (HTTP status and message)

    def as_evidence(self) -> dict:
        return {"accepted": {r: list(p) for r, p in self.routes.items()}, "refused": self.refused}


def base_body(route: str, model: str | None, content: list[int]) -> dict:
    """A minimal neighbour body: a token-id prompt on completions, the same bytes as text in chat."""
    body: dict[str, Any] = {"max_tokens": 2}
    if model:
        body["model"] = model
    if route == COMPLETIONS:
        body["prompt"] = list(content)
    else:
        body["messages"] = [{"role": "user", "content": "".join(chr(c) for c in content)}]
    return body


def _status(url: str, route: str, body: dict, headers: dict) -> tuple[int, str, str | None]:
    """HTTP status, the error's message and the parameter it names (OpenAI errors carry ``param``)."""
    try:
        resp = requests.post(url + route, json=body, headers=headers, timeout=(5.0, 60.0))
    except requests.RequestException as exc:
        return 0, type(exc).__name__, None
    if resp.status_code == 200:
        return 200, "", None
    try:
        data = resp.json()
        err = data.get("error") or data.get("detail") or data
    except (ValueError, AttributeError):
        err = resp.text
    msg = str(err.get("message") if isinstance(err, dict) else err)
    param = err.get("param") if isinstance(err, dict) else None
    return resp.status_code, " ".join(msg.split())[:160], param if isinstance(param, str) else None


def _route_params(url: str, route: str, body: dict, headers: dict) -> tuple[tuple[str, ...], dict[str, str]]:
    """All of a route's parameters in one request; a refusal that names its parameter drops it and
    tries again, one that names none is settled one parameter at a time."""
    todo = [p.name for p in PARAMS if route in p.routes]
    refused: dict[str, str] = {}
    while todo:
        b = dict(body)
        for name in todo:
            apply(b, name, BY_NAME[name].probe)
        code, why, param = _status(url, route, b, headers)
        if code == 200:
            return tuple(todo), refused
        named = next((n for n in todo if param in (n, n.replace("_chat", ""))), None) if param else None
        if named is None or code not in (400, 422):
            break
        refused[named] = f"HTTP {code}: {why}"
        todo.remove(named)

    def one(name: str) -> tuple[str, int, str]:
        b = dict(body)
        apply(b, name, BY_NAME[name].probe)
        return (name, *_status(url, route, b, headers)[:2])

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, todo))
    refused.update({n: f"HTTP {c}: {w}" for n, c, w in results if c != 200})
    return tuple(n for n, c, _ in results if c == 200), refused


def preflight(url: str, model: str | None, headers: dict, text_prompts: bool = False) -> Accepted:
    """Which routes answer and which parameters each accepts (2-token answers; see the module doc)."""
    url = url.rstrip("/")
    content = [ord(c) for c in "Hello there, fuzz."]
    routes: dict[str, tuple[str, ...]] = {}
    refused: dict[str, dict[str, str]] = {}
    for route in (COMPLETIONS, CHAT):
        body = base_body(route, model, content)
        if text_prompts and route == COMPLETIONS:
            body["prompt"] = "".join(chr(c) for c in content)
        code, why, _ = _status(url, route, body, headers)
        if code != 200:
            refused[route] = {"(route)": f"HTTP {code}: {why}"}
            continue
        routes[route], refused[route] = _route_params(url, route, body, headers)
    return Accepted(routes, refused)
