"""Any OpenAI-compatible server through ``POST /v1/completions``.

Completions rather than chat: a token-id prompt sidesteps chat templates, and the legacy logprobs
object carries one entry per token. Plain OpenAI answers carry no token ids, so without extras the
adapter names tokens by their text (interned to ints, marked ``lossy``); servers that return ids
(vLLM's extras, the bundled engine) are compared losslessly.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from .base import (
    Adapter,
    AdapterError,
    Completion,
    GenParams,
    Prompt,
    float_or_none,
    int_list,
    need,
)

_TOKEN_ID = "token_id:"


class OpenAIAdapter(Adapter):
    engine = "openai"
    extras = False  # vLLM-style return_token_ids / return_tokens_as_token_ids / prompt_logprobs

    def __init__(self, base_url: str, **kw: Any) -> None:
        super().__init__(base_url, **kw)
        self._interned: dict[str, int] = {}
        self._lock = threading.Lock()
        self._model_checked = self.model is not None
        self.answered_model: str | None = None  # the ``model`` field of the last completion

    def server_info(self) -> dict | None:
        """What a plain OpenAI server says about itself: the served model from ``/v1/models``
        (``owned_by`` names the software on some servers), else from the last completion's ``model``
        field. No dtype or version: none is reported."""
        try:
            data = self.get("/v1/models", timeout_s=10)
        except AdapterError:
            data = None
        entry = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entry, list) or not entry or not isinstance(entry[0], dict):
            # some servers (transformers serve) fail /v1/models but name the model in each answer
            return {"engine": self.engine, "model": self.answered_model} if self.answered_model else None
        first = entry[0]
        info = {"engine": self.engine, "model": first.get("id"), "owned_by": first.get("owned_by")}
        return {k: v for k, v in info.items() if v is not None}

    # -- request --------------------------------------------------------------------------------
    def _model(self) -> str | None:
        if not self._model_checked:
            try:
                data = self.get("/v1/models", timeout_s=10)
                self.model = need(data, "data[0].id", self.url("/v1/models"), str)
            except AdapterError:
                self.model = None
            self._model_checked = True
        return self.model

    def body(self, prompt: Prompt | list[Prompt], params: GenParams) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": prompt, "max_tokens": params.max_tokens,
                                "temperature": params.temperature}  # fmt: skip
        model = self._model()
        if model:
            body["model"] = model
        if params.seed is not None:
            body["seed"] = params.seed
        if params.logprobs is not None:
            body["logprobs"] = params.logprobs
        if self.extras:
            body["return_token_ids"] = True
            body["return_tokens_as_token_ids"] = True
            if params.ignore_eos:
                body["ignore_eos"] = True
            if params.prompt_logprobs is not None:
                body["prompt_logprobs"] = max(1, params.prompt_logprobs)
        elif params.prompt_logprobs is not None:
            body["echo"] = True
            body.setdefault("logprobs", max(1, params.prompt_logprobs))
        return body

    def generate_one(self, prompt: Prompt, params: GenParams) -> Completion:
        data = self.post("/v1/completions", self.body(prompt, params))
        return self._choices(data, 1, params, [prompt])[0]

    def generate_list(self, prompts: Sequence[Prompt], params: GenParams) -> list[Completion]:
        if all(isinstance(p, str) for p in prompts) or all(isinstance(p, list) for p in prompts):
            data = self.post("/v1/completions", self.body(list(prompts), params))
            return self._choices(data, len(prompts), params, list(prompts))
        raise ValueError("a list request needs all prompts as text or all as token ids")

    def generate_streamed(self, prompt: Prompt, params: GenParams) -> Completion:
        """One prompt with ``stream: true``: the server's streaming path, its events read in full
        and joined into one :class:`Completion` (ids, logprobs and text in arrival order)."""
        url = self.url("/v1/completions")
        text = self.request("POST", "/v1/completions", {**self.body(prompt, params), "stream": True})
        if not isinstance(text, str):
            raise AdapterError(url, "stream", "wrong shape: expected an event stream, got JSON")
        merged: dict[str, Any] = {"text": "", "token_ids": [], "logprobs": None}
        lp: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
        ids_seen = False
        for line in text.splitlines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            try:
                event = json.loads(line[5:])
            except ValueError:
                raise AdapterError(url, "stream", f"malformed event {line[:80]!r}") from None
            for ch in need(event, "choices", url, list, "event"):
                merged["text"] += need(ch, "text", url, str, "event.choices[]")
                if isinstance(ch.get("token_ids"), list):
                    ids_seen = True
                    merged["token_ids"] += ch["token_ids"]
                if isinstance(ch.get("prompt_token_ids"), list):
                    merged["prompt_token_ids"] = ch["prompt_token_ids"]
                if isinstance(ch.get("logprobs"), dict):
                    for k in lp:
                        lp[k] += ch["logprobs"].get(k) or ([None] * len(ch["logprobs"].get("tokens") or []))
                merged["finish_reason"] = ch.get("finish_reason") or merged.get("finish_reason")
        if params.logprobs is not None:
            merged["logprobs"] = lp
        if not ids_seen:
            del merged["token_ids"]
        return self._parse(merged, "stream", url, params, prompt)

    # -- response -------------------------------------------------------------------------------
    def _choices(self, data: Any, count: int, params: GenParams, prompts: list[Prompt]) -> list[Completion]:
        url = self.url("/v1/completions")
        if isinstance(data, dict) and isinstance(data.get("model"), str):
            self.answered_model = data["model"]
        choices = need(data, "choices", url, list)
        if len(choices) != count:
            raise AdapterError(url, "choices", f"wrong shape: {len(choices)} choices for {count} prompts")
        usage = data.get("usage") if isinstance(data, dict) else None
        usage_prompt = usage.get("prompt_tokens") if count == 1 and isinstance(usage, dict) else None
        by_index: dict[int, Completion] = {}
        for k, ch in enumerate(choices):
            idx = (
                need(ch, "index", url, int, f"choices[{k}]") if isinstance(ch, dict) and "index" in ch else k
            )
            if not 0 <= idx < count or idx in by_index:
                raise AdapterError(
                    url, f"choices[{k}].index", f"wrong shape: index {idx} out of range or repeated"
                )
            by_index[idx] = self._parse(ch, f"choices[{k}]", url, params, prompts[idx], usage_prompt)
        cached = None
        if count == 1 and isinstance(usage, dict):
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                cached = details["cached_tokens"]
        out = [by_index[i] for i in range(count)]
        if cached is not None:
            out[0].cached_tokens = cached
        return out

    def _token(self, name: Any, url: str, path: str) -> int:
        if isinstance(name, str) and name.startswith(_TOKEN_ID):
            try:
                return int(name[len(_TOKEN_ID) :])
            except ValueError:
                raise AdapterError(url, path, f"wrong shape: bad token name {name!r}") from None
        if not isinstance(name, str):
            raise AdapterError(url, path, f"wrong shape: expected a token string, got {type(name).__name__}")
        with self._lock:
            return self._interned.setdefault(name, len(self._interned))

    def _parse(
        self, ch: Any, at: str, url: str, params: GenParams, prompt: Prompt, usage_prompt: int | None = None
    ) -> Completion:
        text = need(ch, "text", url, str, at)
        lp_obj = ch.get("logprobs") if isinstance(ch, dict) else None
        if params.logprobs is not None or (params.prompt_logprobs is not None and not self.extras):
            lp_obj = need(ch, "logprobs", url, dict, at)
        tokens = token_lps = tops = None
        if lp_obj is not None:
            names = need(lp_obj, "tokens", url, list, f"{at}.logprobs")
            tokens = [self._token(n, url, f"{at}.logprobs.tokens[{i}]") for i, n in enumerate(names)]
            raw = need(lp_obj, "token_logprobs", url, list, f"{at}.logprobs")
            token_lps = [
                float_or_none(v, url, f"{at}.logprobs.token_logprobs[{i}]") for i, v in enumerate(raw)
            ]
            raw_top = lp_obj.get("top_logprobs") or [None] * len(tokens)
            if not isinstance(raw_top, list):
                raise AdapterError(url, f"{at}.logprobs.top_logprobs", "wrong shape: expected a list")
            tops = []
            for i, entry in enumerate(raw_top):
                if entry is None:
                    tops.append([])
                    continue
                if not isinstance(entry, dict):
                    raise AdapterError(
                        url, f"{at}.logprobs.top_logprobs[{i}]", "wrong shape: expected an object"
                    )
                tops.append([(self._token(n, url, f"{at}.logprobs.top_logprobs[{i}]"),
                              float_or_none(v, url, f"{at}.logprobs.top_logprobs[{i}]")) for n, v in entry.items()])  # fmt: skip
            if len(token_lps) != len(tokens) or len(tops) != len(tokens):
                raise AdapterError(
                    url, f"{at}.logprobs", "wrong shape: tokens/token_logprobs/top_logprobs lengths differ"
                )
        prompt_ids = ch.get("prompt_token_ids") if isinstance(ch, dict) else None
        if prompt_ids is not None:
            prompt_ids = int_list(prompt_ids, url, f"{at}.prompt_token_ids")
        elif isinstance(prompt, list):
            prompt_ids = list(prompt)
        prompt_lps = None
        if params.prompt_logprobs is not None:
            if self.extras:
                prompt_lps = self._vllm_prompt_logprobs(ch, at, url, prompt_ids)
            else:
                n_prompt = len(prompt_ids) if prompt_ids is not None else usage_prompt
                if n_prompt is None or tokens is None or n_prompt > len(tokens):
                    raise AdapterError(
                        url,
                        "usage.prompt_tokens",
                        "missing: cannot split the echoed prompt from the completion",
                    )
                prompt_lps = list(token_lps[:n_prompt]) if token_lps else None
                tokens, token_lps, tops = tokens[n_prompt:], token_lps[n_prompt:], tops[n_prompt:]
        if "token_ids" in ch or self.extras:
            ids = int_list(need(ch, "token_ids", url, list, at), url, f"{at}.token_ids")
            lossy = False
        elif tokens is not None:
            ids, lossy = tokens, True
        else:
            ids, lossy = list(text.encode("utf-8")), True
        if token_lps is not None and len(token_lps) != len(ids):
            raise AdapterError(
                url,
                f"{at}.logprobs.token_logprobs",
                f"wrong shape: {len(token_lps)} logprobs for {len(ids)} tokens",
            )
        return Completion(
            token_ids=ids,
            text=text,
            prompt_token_ids=prompt_ids,
            logprobs=token_lps,
            top_logprobs=tops,
            prompt_logprobs=prompt_lps,
            finish_reason=ch.get("finish_reason"),
            extra={"lossy_token_ids": True} if lossy else {},
        )

    def _vllm_prompt_logprobs(
        self, ch: dict, at: str, url: str, prompt_ids: list[int] | None
    ) -> list[float | None]:
        raw = need(ch, "prompt_logprobs", url, list, at)
        if prompt_ids is None or len(raw) != len(prompt_ids):
            n_ids = "?" if prompt_ids is None else len(prompt_ids)
            raise AdapterError(
                url, f"{at}.prompt_logprobs", f"wrong shape: {len(raw)} entries for {n_ids} prompt tokens"
            )
        out: list[float | None] = []
        for pos, (entry, tid) in enumerate(zip(raw, prompt_ids, strict=True)):
            if entry is None:
                out.append(None)
                continue
            path = f"{at}.prompt_logprobs[{pos}]"
            if not isinstance(entry, dict) or str(tid) not in entry:
                raise AdapterError(url, path, f"missing the prompt token {tid}")
            val = entry[str(tid)]
            out.append(float_or_none(val.get("logprob") if isinstance(val, dict) else val, url, path))
        return out
