"""SGLang's native ``POST /generate``: ids in (``input_ids``), ids out (``output_ids``), logprobs as
``[logprob, id, text]`` triples, prompt logprobs via ``logprob_start_len: 0``, ``cached_tokens``
in ``meta_info``; ``/flush_cache`` and ``/server_info`` (``enable_deterministic_inference``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Adapter, AdapterError, Completion, GenParams, Prompt, float_or_none, int_list, need


def identity(info: dict[str, Any]) -> dict[str, Any]:
    """SGLang's flat ``/server_info`` plus the record keys it names differently: the served model
    (``served_model_name`` or ``model_path``), prefix caching (not ``disable_radix_cache``), CUDA
    graphs (not ``disable_cuda_graph``) and ``max_num_seqs`` (``max_running_requests``)."""
    out = dict(info)
    out.setdefault("engine", "sglang")
    if not out.get("model"):
        out["model"] = info.get("served_model_name") or info.get("model_path")
    if "disable_radix_cache" in info:
        out.setdefault("enable_prefix_cache", not info["disable_radix_cache"])
    if "disable_cuda_graph" in info:
        out.setdefault("cuda_graph", not info["disable_cuda_graph"])
    if info.get("max_running_requests") is not None:
        out.setdefault("max_num_seqs", info["max_running_requests"])
    return out


class SGLangAdapter(Adapter):
    engine = "sglang"

    def body(self, prompt: Prompt | list[Prompt], params: GenParams, batch: bool) -> dict[str, Any]:
        sample = prompt[0] if batch else prompt
        key = "text" if isinstance(sample, str) else "input_ids"
        sp: dict[str, Any] = {"max_new_tokens": params.max_tokens, "temperature": params.temperature,
                              "ignore_eos": params.ignore_eos}  # fmt: skip
        if params.seed is not None:
            sp["sampling_seed"] = params.seed
        body: dict[str, Any] = {key: prompt, "sampling_params": sp, "stream": False}
        if params.logprobs is not None or params.prompt_logprobs is not None:
            body["return_logprob"] = True
            body["top_logprobs_num"] = max(params.logprobs or 0, params.prompt_logprobs or 0)
            body["logprob_start_len"] = 0 if params.prompt_logprobs is not None else -1
        return body

    def generate_one(self, prompt: Prompt, params: GenParams) -> Completion:
        data = self.post("/generate", self.body(prompt, params, False))
        if isinstance(data, list) and len(data) == 1:
            data = data[0]
        return self._parse(data, "", params, prompt)

    def generate_list(self, prompts: Sequence[Prompt], params: GenParams) -> list[Completion]:
        data = self.post("/generate", self.body(list(prompts), params, True))
        url = self.url("/generate")
        if not isinstance(data, list) or len(data) != len(prompts):
            raise AdapterError(url, "body", f"wrong shape: expected a list of {len(prompts)} results")
        return [
            self._parse(d, f"[{i}]", params, p) for i, (d, p) in enumerate(zip(data, prompts, strict=True))
        ]

    def _parse(self, d: Any, at: str, params: GenParams, prompt: Prompt) -> Completion:
        url = self.url("/generate")
        p = (at + ".") if at else ""
        ids = int_list(need(d, "output_ids", url, list, at), url, p + "output_ids")
        text = d.get("text", "")
        meta = need(d, "meta_info", url, dict, at)
        lps = tops = prompt_lps = None
        if params.logprobs is not None:
            triples = need(meta, "output_token_logprobs", url, list, p + "meta_info")
            lps = [float_or_none(t[0] if isinstance(t, list) and t else None, url, f"{p}meta_info.output_token_logprobs[{i}]")
                   for i, t in enumerate(triples)]  # fmt: skip
            if len(lps) != len(ids):
                raise AdapterError(
                    url,
                    f"{p}meta_info.output_token_logprobs",
                    f"wrong shape: {len(lps)} entries for {len(ids)} tokens",
                )
            raw_top = meta.get("output_top_logprobs") or [[] for _ in ids]
            tops = [[(int(t[1]), float(t[0])) for t in (row or []) if isinstance(t, list) and len(t) >= 2 and t[0] is not None]
                    for row in raw_top]  # fmt: skip
        if params.prompt_logprobs is not None:
            triples = need(meta, "input_token_logprobs", url, list, p + "meta_info")
            prompt_lps = [float_or_none(t[0] if isinstance(t, list) and t else None, url, f"{p}meta_info.input_token_logprobs[{i}]")
                          for i, t in enumerate(triples)]  # fmt: skip
        cached = meta.get("cached_tokens")
        fr = meta.get("finish_reason")
        return Completion(
            token_ids=ids,
            text=text if isinstance(text, str) else "",
            prompt_token_ids=list(prompt) if isinstance(prompt, list) else None,
            logprobs=lps,
            top_logprobs=tops,
            prompt_logprobs=prompt_lps,
            cached_tokens=cached if isinstance(cached, int) else None,
            finish_reason=fr.get("type") if isinstance(fr, dict) else fr,
        )

    def server_info(self) -> dict | None:
        for path in ("/server_info", "/get_server_info"):
            try:
                info = self.get(path, timeout_s=30)
            except AdapterError:
                continue
            if isinstance(info, dict):
                return identity(info)
        return None

    def flush_cache(self) -> bool:
        return self.post_succeeds("/flush_cache?timeout=60")
