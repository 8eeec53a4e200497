"""Request schemas and validation for the bundled engine's HTTP API.

Models are strict (no "5" -> 5, no true -> 1, no NaN): the harness drives this server to find
bugs, so a client that sends the wrong type should hear about it instead of being silently
coerced. Unknown fields are ignored, as OpenAI-compatible servers do, so that clients sending
extras (``user``, ``stream_options`` ...) work unchanged. Every failure becomes an
:class:`APIError` that the server renders as HTTP 400 with an OpenAI-style body naming the field.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_TOP_LOGPROBS = 20
MAX_STOP_STRINGS = 16


class APIError(Exception):
    """An error with an HTTP status and an OpenAI-style body."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        type: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.type = type
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


Seed = int
Stop = str | list[str] | None


class StreamOptions(_Strict):
    include_usage: bool = False


class OpenAIRequest(_Strict):
    """The fields both OpenAI routes take alike: sampling, stop, streaming and vLLM-style extras.

    Each route adds its own (prompt or messages, ``max_tokens``' default, the ``logprobs`` shape);
    pydantic lists these shared fields first, so of several bad fields one of these is named.
    """

    model: str | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=100.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    n: int = Field(default=1, ge=1)
    seed: Seed | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    stop: Stop = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    prompt_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    min_tokens: int | None = None


class CompletionRequest(OpenAIRequest):
    """``POST /v1/completions`` (OpenAI legacy completions, plus vLLM-style extras)."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)
    best_of: int | None = None
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    suffix: str | None = None


class ContentPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text; content parts are concatenated."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ChatCompletionRequest(OpenAIRequest):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    add_generation_prompt: bool = True
    tools: list[Any] | None = None


class GenerateSamplingParams(_Strict):
    """SGLang ``sampling_params``; ``None`` means the default, as in SGLang."""

    max_new_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=100.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    n: int | None = Field(default=None, ge=1)
    sampling_seed: Seed | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    stop: Stop = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    min_new_tokens: int | None = None
    skip_special_tokens: bool | None = None
    no_stop_trim: bool | None = None


class GenerateRequest(_Strict):
    """SGLang ``POST /generate``: exactly one of ``text`` / ``input_ids``, single or a list."""

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: GenerateSamplingParams | list[GenerateSamplingParams] | None = None
    return_logprob: bool | list[bool] = False
    logprob_start_len: int | list[int] = -1
    top_logprobs_num: int | list[int] = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    rid: str | list[str] | None = None


def _loc_to_param(loc: tuple[Any, ...]) -> str | None:
    """Turn a pydantic error location into a dotted field name (``messages.0.content``).

    Union branches add the branch's type name (``str``, ``list[int]``) to the location; those
    segments are dropped so the field itself is named.
    """
    parts = []
    for item in loc:
        if isinstance(item, int):
            parts.append(str(item))
        elif isinstance(item, str) and ("[" in item or item in {"str", "int", "float", "bool", "list"}):
            continue
        elif isinstance(item, str) and item and item[0].isupper():
            continue  # a model class name inside a union
        else:
            parts.append(str(item))
    return ".".join(parts) or None


def parse_json_body(raw: bytes) -> Any:
    """Decode a request body; malformed JSON or non-finite numbers are a 400."""
    if not raw.strip():
        raise APIError("request body is empty; expected a JSON object", param="body")

    def _reject_constant(name: str) -> float:
        raise ValueError(f"{name} is not valid JSON")

    try:
        obj = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as e:
        raise APIError(f"malformed JSON body: {e}", param="body", code="json_invalid") from None
    except RecursionError:
        raise APIError(f"JSON body nested deeper than {MAX_JSON_DEPTH} levels", param="body",
                       code="json_invalid") from None  # fmt: skip
    check_json_tree(obj)
    return obj


MAX_JSON_DEPTH = 32  # the deepest valid body (chat messages with content parts) is 5


def check_json_tree(obj: Any) -> None:
    """A 400 for a body nested deeper than ``MAX_JSON_DEPTH`` or holding a string that is not valid
    Unicode text (a lone surrogate such as ``"\\ud800"``), checked before any field is used, so that
    neither can reach validation or generation (each gave a 500, one after a full generation)."""
    stack: list[tuple[Any, str, int]] = [(obj, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise APIError(f"JSON body nested deeper than {MAX_JSON_DEPTH} levels", param="body", code="json_invalid")
        if isinstance(node, str):
            _check_text(node, path)
        elif isinstance(node, dict):
            for key, value in node.items():
                sub = f"{path}.{key}" if path else str(key)
                _check_text(key, sub)
                stack.append((value, sub, depth + 1))
        elif isinstance(node, list):
            stack.extend((value, f"{path}.{i}" if path else str(i), depth + 1) for i, value in enumerate(node))


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        where = path.encode("utf-8", "backslashreplace").decode("utf-8") or "body"
        raise APIError(f"invalid text in '{where}': lone surrogate at character {e.start}", param=where) from None


def validate(model: type[BaseModel], payload: Any) -> Any:
    """Validate ``payload`` against ``model``; the first error becomes a 400 naming its field."""
    if not isinstance(payload, dict):
        raise APIError("request body must be a JSON object", param="body")
    try:
        return model.model_validate(payload)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        param = _loc_to_param(tuple(err.get("loc", ())))
        where = f"'{param}'" if param else "body"
        raise APIError(f"invalid field {where}: {err.get('msg', 'invalid value')}", param=param) from None


def reject_unsupported(req: Any, fields: dict[str, Any]) -> None:
    """Refuse knobs we do not implement instead of silently ignoring them.

    ``fields`` maps a field name to its neutral value; anything else is a 400. Silently dropping a
    penalty would make the server's output mean something other than what the client asked for.
    """
    for name, neutral in fields.items():
        value = getattr(req, name, None)
        if value is None or value == neutral:
            continue
        if isinstance(neutral, dict) and not value:
            continue
        raise APIError(f"'{name}' is not supported by the bundled engine", param=name, code="unsupported")


def normalize_stop(stop: Stop, param: str = "stop") -> list[str]:
    """Stop strings as a list; empty strings and overly long lists are refused."""
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if len(stops) > MAX_STOP_STRINGS:
        raise APIError(f"at most {MAX_STOP_STRINGS} stop strings are allowed", param=param)
    if any(s == "" for s in stops):
        raise APIError("stop strings must be non-empty", param=param)
    return stops
