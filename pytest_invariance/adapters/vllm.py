"""vLLM's OpenAI server with its extras: ``return_token_ids`` and ``return_tokens_as_token_ids``
(lossless ids), ``prompt_logprobs`` (prefill rescoring), ``ignore_eos``.

vLLM reports its mode only through ``/server_info`` under ``VLLM_SERVER_DEV_MODE=1`` (the
``VLLM_BATCH_INVARIANT`` variable in ``vllm_env``); elsewhere the mode is unknown (None). Its
prefix cache is reset through ``/reset_prefix_cache`` (dev mode too).
"""

from __future__ import annotations

from .base import AdapterError
from .openai import OpenAIAdapter


class VLLMAdapter(OpenAIAdapter):
    engine = "vllm"
    extras = True

    def server_info(self) -> dict | None:
        try:
            info = self.get("/server_info", timeout_s=10)
        except AdapterError:
            return None
        return info if isinstance(info, dict) else None

    def mode(self, info: dict | None) -> str | None:
        if not info:
            return None
        env = info.get("vllm_env")
        if isinstance(env, dict) and "VLLM_BATCH_INVARIANT" in env:
            return "invariant" if str(env["VLLM_BATCH_INVARIANT"]).lower() in ("1", "true") else "default"
        return super().mode(info)

    def flush_cache(self) -> bool:
        try:
            self.request("POST", "/reset_prefix_cache")
        except AdapterError:
            return False
        return True
