"""vLLM's OpenAI server with its extras: ``return_token_ids`` and ``return_tokens_as_token_ids``
(lossless ids), ``prompt_logprobs`` (prefill rescoring), ``ignore_eos``.

vLLM reports its configuration only through ``/server_info`` under ``VLLM_SERVER_DEV_MODE=1``:
``?config_format=json`` gives the ``vllm_config`` as nested JSON (0.32), older servers give one
``repr``-like string, parsed here for its top-level ``key=value`` pairs. Either way the answer is
flattened into the keys the records use (model, dtype, quantization, block size, chunk budget,
prefix caching, chunked prefill, max_num_seqs, enforce_eager, cuda-graph mode), because a record
whose target is "model None, dtype None" says nothing about what was tested. The mode comes from
``VLLM_BATCH_INVARIANT`` in ``vllm_env``; the version from ``/version``. The prefix cache is reset
through ``/reset_prefix_cache`` (dev mode too).
"""

from __future__ import annotations

import re
from typing import Any

from .base import AdapterError
from .openai import OpenAIAdapter

# flat record key -> (section of the JSON vllm_config, key in it); the string form has the same key
_FIELDS = {
    "model": ("model_config", "model"),
    "served_model_name": ("model_config", "served_model_name"),
    "dtype": ("model_config", "dtype"),
    "quantization": ("model_config", "quantization"),
    "max_model_len": ("model_config", "max_model_len"),
    "enforce_eager": ("model_config", "enforce_eager"),
    "seed": ("model_config", "seed"),
    "block_size": ("cache_config", "block_size"),
    "kv_cache_dtype": ("cache_config", "cache_dtype"),
    "enable_prefix_cache": ("cache_config", "enable_prefix_caching"),
    "chunk_size": ("scheduler_config", "max_num_batched_tokens"),
    "enable_chunked_prefill": ("scheduler_config", "enable_chunked_prefill"),
    "max_num_seqs": ("scheduler_config", "max_num_seqs"),
    "cudagraph_mode": ("compilation_config", "cudagraph_mode"),
    "cudagraph_capture_sizes": ("compilation_config", "cudagraph_capture_sizes"),
    "compilation_mode": ("compilation_config", "mode"),
    "tp_size": ("parallel_config", "tensor_parallel_size"),
    "device": ("device_config", "device"),
}
# names in the string form where they differ from the JSON one
_STRING_NAMES = {"enable_prefix_cache": "enable_prefix_caching", "max_model_len": "max_seq_len",
                 "tp_size": "tensor_parallel_size", "device": "device_config",
                 "kv_cache_dtype": "kv_cache_dtype"}  # fmt: skip
_CUDAGRAPH_MODES = {0: "NONE", 1: "PIECEWISE", 2: "FULL", 3: "FULL_DECODE_ONLY", 4: "FULL_AND_PIECEWISE"}
_PAIR = re.compile(r"(?:^|, )([A-Za-z_][A-Za-z0-9_]*)=('(?:[^'\\]|\\.)*'|[^,{(\[]*)")


def _scalar(text: str) -> Any:
    """One value of the string form: quoted text, None/True/False, an int, else the bare word."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    if text in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[text]
    try:
        return int(text)
    except ValueError:
        return text


def parse_config_string(text: str) -> dict[str, Any]:
    """Top-level scalar ``key=value`` pairs of ``str(VllmConfig)``; nested objects are skipped,
    except ``'cudagraph_mode': <CUDAGraphMode.NAME: n>`` inside ``compilation_config``."""
    pairs = {m.group(1): _scalar(m.group(2)) for m in _PAIR.finditer(text) if m.group(2).strip()}
    out = {flat: pairs[_STRING_NAMES.get(flat, key)] for flat, (_, key) in _FIELDS.items()
           if _STRING_NAMES.get(flat, key) in pairs}  # fmt: skip
    m = re.search(r"'cudagraph_mode': <CUDAGraphMode\.([A-Z_]+)", text)
    if m:
        out["cudagraph_mode"] = m.group(1)
    m = re.search(r"'mode': <CompilationMode\.([A-Z_]+)", text)
    if m:
        out["compilation_mode"] = m.group(1)
    return out


def flatten_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The JSON ``vllm_config`` (sections of dicts) as the flat record keys."""
    out: dict[str, Any] = {}
    for flat, (section, key) in _FIELDS.items():
        sec = cfg.get(section)
        if isinstance(sec, dict) and key in sec:
            out[flat] = sec[key]
    if isinstance(out.get("cudagraph_mode"), int):
        out["cudagraph_mode"] = _CUDAGRAPH_MODES.get(out["cudagraph_mode"], out["cudagraph_mode"])
    return out


def normalize(raw: dict[str, Any], version: str | None = None) -> dict[str, Any]:
    """``/server_info``'s answer (either form) as flat record keys, the raw env kept for ``mode``."""
    cfg = raw.get("vllm_config")
    flat = flatten_config(cfg) if isinstance(cfg, dict) else parse_config_string(cfg) if isinstance(cfg, str) else {}
    dtype = flat.get("dtype")
    if isinstance(dtype, str) and dtype.startswith("torch."):
        flat["dtype"] = dtype[len("torch."):]
    if flat.get("quantization") is None and "quantization" in flat:
        flat["quantization"] = "none"
    if isinstance(flat.get("device"), str) and flat["device"].startswith("DeviceConfig"):
        flat.pop("device")
    if flat.get("served_model_name"):  # the name requests use; the path is kept as model_path
        flat["model_path"], flat["model"] = flat.get("model"), flat["served_model_name"]
    env = raw.get("vllm_env")
    if isinstance(env, dict) and "VLLM_BATCH_INVARIANT" in env:
        flat["batch_invariant"] = str(env["VLLM_BATCH_INVARIANT"]).lower() in ("1", "true")
    return {"engine": "vllm", **({"version": version} if version else {}), **flat,
            **{k: v for k, v in raw.items() if k in ("vllm_env",)}}  # fmt: skip


class VLLMAdapter(OpenAIAdapter):
    engine = "vllm"
    extras = True

    def speculative_stats(self) -> dict[str, int] | None:
        """vLLM's speculative counters from ``/metrics`` (``vllm:spec_decode_num_draft_tokens`` and
        ``..._accepted_tokens``, summed over label sets); None when it exports none (no drafts yet,
        or speculation off)."""
        try:
            text = self.get("/metrics", timeout_s=10)
        except AdapterError:
            return None
        return parse_spec_decode_metrics(text) if isinstance(text, str) else None

    def server_info(self) -> dict | None:
        raw = None
        for path in ("/server_info?config_format=json", "/server_info"):
            try:
                raw = self.get(path, timeout_s=10)
            except AdapterError:
                continue
            if isinstance(raw, dict):
                break
        if not isinstance(raw, dict):  # not in dev mode: what /v1/models says
            return super().server_info()
        try:
            ver = self.get("/version", timeout_s=10)
        except AdapterError:
            ver = None
        return normalize(raw, ver.get("version") if isinstance(ver, dict) else None)

    def mode(self, info: dict | None) -> str | None:
        if not info:
            return None
        env = info.get("vllm_env")
        if isinstance(env, dict) and "VLLM_BATCH_INVARIANT" in env:
            return "invariant" if str(env["VLLM_BATCH_INVARIANT"]).lower() in ("1", "true") else "default"
        return super().mode(info)

    def flush_cache(self) -> bool:
        return self.post_succeeds("/reset_prefix_cache")


_SPEC_METRIC = re.compile(r"^vllm:spec_decode_num_(draft|accepted)_tokens(?:_total)?(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.M)


def parse_spec_decode_metrics(text: str) -> dict[str, int] | None:
    """``{"draft_tokens": N, "accepted_tokens": M}`` from a Prometheus page (None: neither counter)."""
    found: dict[str, int] = {}
    for kind, value in _SPEC_METRIC.findall(text):
        key = f"{kind}_tokens"
        found[key] = found.get(key, 0) + int(float(value))
    return found or None
