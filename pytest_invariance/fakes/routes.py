"""The fakes' routes: request bodies in, answers in the shape each real server gives them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

from .model import decode, encode
from .protocol import MODEL_NAME, BadRequest, parse_prompts, tokens, wait
from .scheduler import Row

_TOKEN = "token_id:{}"


def get(fake: Any, h: Any) -> None:
    path = h.path.split("?")[0]
    if path == "/health":
        return h.send_text(200, "")
    if path == "/v1/models":
        return h.send_json(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model",
                                                              "owned_by": f"fake-{fake.config.bug}"}]})  # fmt: skip
    if path in ("/server_info", "/get_server_info"):
        info = fake.server_info()
        return h.send_json(200, info) if info is not None else h.send_json(404, {"error": {"message": "not found"}})
    if path == "/version" and fake.report_ladder == "vllm":
        return h.send_json(200, {"version": "fake"})
    if path == "/model_info":
        return h.send_json(200, {"model_path": MODEL_NAME})
    if path == "/metrics":
        return h.send_text(200, fake.metrics())
    h.send_json(404, {"error": {"message": f"no route {path}"}})


def post(fake: Any, h: Any, body: dict) -> None:
    path = h.path.split("?")[0]
    if path in ("/flush_cache", "/reset_prefix_cache"):
        assert fake.scheduler is not None
        fake.scheduler.flush_cache()
        return h.send_text(200, "")
    if path == "/v1/completions":
        return completions(fake, h, body)
    if path == "/v1/chat/completions":
        return chat(fake, h, body)
    if path == "/generate":
        return generate(fake, h, body)
    h.send_json(404, {"error": {"message": f"no route {path}"}})


def _logprobs_obj(r: Row, start: int, end: int, offset: int = 0) -> dict:
    return {"tokens": [_TOKEN.format(t) for t in r.tokens[start:end]],
            "token_logprobs": r.logprobs[start:end],
            "top_logprobs": [{_TOKEN.format(t): lp for t, lp in top} or None for top in r.tops[start:end]],
            "text_offset": list(range(offset, offset + end - start))}  # fmt: skip


def _echoed(r: Row, lp: dict) -> dict:
    """``echo`` with logprobs: the prompt's tokens and logprobs first, as the legacy API gives them."""
    assert r.prompt_logprobs is not None
    return {"tokens": [_TOKEN.format(t) for t in r.prompt] + lp["tokens"],
            "token_logprobs": list(r.prompt_logprobs) + lp["token_logprobs"],
            "top_logprobs": [None] * len(r.prompt) + lp["top_logprobs"],
            "text_offset": list(range(len(r.prompt))) + [len(r.prompt) + o for o in lp["text_offset"]]}  # fmt: skip


def _usage(rows: list[Row]) -> dict:
    u: dict[str, Any] = {"prompt_tokens": sum(len(r.prompt) for r in rows),
                         "completion_tokens": sum(len(r.tokens) for r in rows)}  # fmt: skip
    u["total_tokens"] = u["prompt_tokens"] + u["completion_tokens"]
    u["prompt_tokens_details"] = {"cached_tokens": sum(r.cached_tokens for r in rows)}
    return u


def _n(body: dict) -> int:
    n = body.get("n") or 1
    if not isinstance(n, int) or not 1 <= n <= 16:
        raise BadRequest("n must be an integer in 1..16")
    return n


def completions(fake: Any, h: Any, body: dict) -> None:
    if "prompt" not in body:
        raise BadRequest("missing prompt")
    prompts = parse_prompts(body["prompt"])
    echo, want_lp = bool(body.get("echo")), body.get("logprobs") is not None
    vllm_plp = body.get("prompt_logprobs") is not None
    rows = fake.rows(prompts, body, _n(body), prompt_logprobs=echo or vllm_plp)
    base = {"id": f"cmpl-{rows[0].request}", "object": "text_completion", "created": int(time.time()),
            "model": MODEL_NAME}  # fmt: skip
    if body.get("stream"):
        return h.send_events(_completion_events(rows, base, want_lp), rows)
    wait(rows)
    choices = []
    for i, r in enumerate(rows):
        ch: dict[str, Any] = {"index": i, "text": (decode(r.prompt) if echo else "") + decode(r.tokens),
                              "finish_reason": "length", "token_ids": r.tokens, "prompt_token_ids": r.prompt}  # fmt: skip
        if want_lp:
            lp = _logprobs_obj(r, 0, len(r.tokens))
            ch["logprobs"] = _echoed(r, lp) if echo else lp
        else:
            ch["logprobs"] = None
        if vllm_plp:
            assert r.prompt_logprobs is not None
            ch["prompt_logprobs"] = [None if v is None else {str(t): {"logprob": v}}
                                     for t, v in zip(r.prompt, r.prompt_logprobs, strict=True)]  # fmt: skip
        choices.append(ch)
    h.send_json(200, {**base, "choices": choices, "usage": _usage(rows)})


def _completion_events(rows: list[Row], base: dict, want_lp: bool) -> Iterator[dict]:
    for i, r, k in tokens(rows):
        ch: dict[str, Any] = {"index": i, "text": decode([r.tokens[k]]), "token_ids": [r.tokens[k]],
                              "logprobs": _logprobs_obj(r, k, k + 1, k) if want_lp else None,
                              "finish_reason": "length" if k + 1 == r.max_tokens else None}  # fmt: skip
        yield {**base, "choices": [ch]}


def _chat_prompt(body: dict) -> list[int]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
        raise BadRequest("messages must be a non-empty list of objects")
    text = "".join(f"{m.get('role', 'user')}: {m.get('content') if isinstance(m.get('content'), str) else ''}\n"
                   for m in msgs) + "assistant: "  # fmt: skip
    return encode(text)


def _chat_logprobs(r: Row, start: int, end: int) -> dict:
    return {"content": [{"token": _TOKEN.format(t), "logprob": lp,
                         "top_logprobs": [{"token": _TOKEN.format(a), "logprob": b} for a, b in top]}
                        for t, lp, top in zip(r.tokens[start:end], r.logprobs[start:end], r.tops[start:end], strict=True)]}  # fmt: skip


def chat(fake: Any, h: Any, body: dict) -> None:
    rows = fake.rows([_chat_prompt(body)], body, _n(body))
    want_lp = bool(body.get("logprobs"))
    base = {"id": f"chatcmpl-{rows[0].request}", "created": int(time.time()), "model": MODEL_NAME}
    if body.get("stream"):
        def events() -> Iterator[dict]:
            for i, r, k in tokens(rows):
                ch = {"index": i, "delta": {"content": decode([r.tokens[k]])}, "token_ids": [r.tokens[k]],
                      "logprobs": _chat_logprobs(r, k, k + 1) if want_lp else None,
                      "finish_reason": "length" if k + 1 == r.max_tokens else None}  # fmt: skip
                yield {**base, "object": "chat.completion.chunk", "choices": [ch]}
        return h.send_events(events(), rows)
    wait(rows)
    choices = [{"index": i, "message": {"role": "assistant", "content": decode(r.tokens)}, "token_ids": r.tokens,
                "logprobs": _chat_logprobs(r, 0, len(r.tokens)) if want_lp else None, "finish_reason": "length"}
               for i, r in enumerate(rows)]  # fmt: skip
    h.send_json(200, {**base, "object": "chat.completion", "choices": choices, "usage": _usage(rows)})


def generate(fake: Any, h: Any, body: dict) -> None:
    """SGLang's native route: ``text`` or ``input_ids`` (one or a list), ``sampling_params``."""
    raw = body["text"] if "text" in body else body.get("input_ids")
    if raw is None:
        raise BadRequest("missing text or input_ids")
    single = isinstance(raw, str) or (isinstance(raw, list) and bool(raw) and isinstance(raw[0], int))
    prompts = parse_prompts(raw)
    sp = body.get("sampling_params") or {}
    top = int(body.get("top_logprobs_num") or 0) if body.get("return_logprob") else 0
    opts = {"max_tokens": sp.get("max_new_tokens") or 128, "temperature": sp.get("temperature", 1.0),
            "seed": sp.get("sampling_seed"), "logprobs": top, **{k: sp.get(k) for k in ("top_p", "top_k")}}  # fmt: skip
    plp = bool(body.get("return_logprob")) and body.get("logprob_start_len") == 0
    rows = fake.rows(prompts, opts, prompt_logprobs=plp)
    wait(rows)
    out = []
    for r in rows:
        meta: dict[str, Any] = {"finish_reason": {"type": "length"}, "cached_tokens": r.cached_tokens,
                                "prompt_tokens": len(r.prompt), "completion_tokens": len(r.tokens)}  # fmt: skip
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [[lp, t, None] for t, lp in zip(r.tokens, r.logprobs, strict=True)]
            meta["output_top_logprobs"] = [[[b, a, None] for a, b in top] for top in r.tops]
            if plp:
                assert r.prompt_logprobs is not None
                meta["input_token_logprobs"] = [[v, t, None] for t, v in zip(r.prompt, r.prompt_logprobs, strict=True)]
        out.append({"text": decode(r.tokens), "output_ids": r.tokens, "meta_info": meta})
    h.send_json(200, out[0] if single else out)



def handler(fake: Any) -> type[BaseHTTPRequestHandler]:
    """The request handler class of one fake (``fake``: its FakeEngine)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def send_json(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_text(self, status: int, text: str) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_events(self, events: Iterator[dict], rows: list[Row]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()  # HTTP/1.0: the stream ends when the connection closes
            try:
                for ev in events:
                    self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
            except OSError:  # the client went away mid-stream: its rows are aborted, as a real engine does
                assert fake.scheduler is not None
                fake.scheduler.abort(rows)

        def do_GET(self) -> None:
            get(fake, self)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise BadRequest("the body must be a JSON object")
                post(fake, self, body)
            except (BadRequest, json.JSONDecodeError) as exc:
                self.send_json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})

    return Handler


__all__ = ["chat", "completions", "generate", "get", "handler", "post"]
