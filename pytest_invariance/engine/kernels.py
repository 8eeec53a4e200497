"""The one place where the engine picks its kernels: from the catalogue, by name, per mode.

Default mode is what a throughput-minded engine does, and its batch dependence is *designed*, not
inherited from the host's BLAS (stock bf16 ``F.linear`` is batch-invariant on some x86 CPUs and not
on others). Three mechanisms that real engines use make a row's arithmetic follow its batch or its cache
state on any host:

- ``gemm_strategy="m-bucket"``: a GEMM strategy chosen by the step's token count M, as cuBLAS
  heuristics and CUTLASS M-bucket dispatch choose one: split-K with fp32 partials for
  ``M <= splitk_max_m`` (few output tiles, so K is cut to fill the machine), one stock pass above;
- ``split_kv="auto"``: flash-decoding whose split count follows batch size and core / SM count;
- ``prefix_attention="cascade"``: a prefill chunk with a prefix (a prefix-cache hit, or an earlier
  chunk) attends to it and to itself as two LSE-merged partial softmaxes, so a warm request or a
  chunk boundary computes differently from the same request cold and whole.

All are knobs of ``EngineConfig`` reported by ``/server_info``; switched off, what remains is the
stock kernels' own behaviour (grouped MoE GEMMs, SDPA prefill). Invariant mode routes every reduction to
`pytest_invariance.reference_kernels`. A reference kernel that is not importable yet is *not*
replaced silently: the fallback is named in `Kernels.routes`, which `LLMEngine.info()` reports.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F

from ..reference_kernels.attention.stock import gather_paged
from .config import EngineConfig

_NEG = -1e30  # finite mask value: exp(_NEG - m) is exactly 0 and never produces NaN


@dataclass
class AttnBatch:
    """Per-step attention metadata, flat over the step's tokens (sequences in batch order)."""

    q_starts: list[int]  # first row of each sequence in the step's flat token batch
    q_lens: list[int]  # new tokens of each sequence in this step
    ctx_lens: list[int]  # tokens in the cache after this step (prefix + new)
    block_tables: list[list[int]]
    slot_mapping: torch.Tensor  # [T] cache slot of every new token
    decode_idx: list[int] = field(default_factory=list)  # sequences with q_len == 1 and a prefix
    block_table_tensor: torch.Tensor | None = None  # [len(decode_idx), max_blocks], padded with 0
    decode_ctx: torch.Tensor | None = None  # [len(decode_idx)]
    all_decode: bool = False  # every row is one decode query, in sequence order (a decode-only step)
    decode_splits: int | None = None  # default-mode split count fixed by the caller (a captured graph)


def parallel_units(device: torch.device) -> int:
    """Work units a split-KV heuristic tries to fill: SMs on CUDA; on CPU intra-op threads x 16 (a CPU
    decode kernel cuts the KV so every thread has several chunks to balance). On a 2-core host with
    4 KV heads that is 8 splits at batch 1, 4 at 2, 2 at 4 and 1 from 8 (capped by context length)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, torch.get_num_threads()) * 16


def _partial_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 attention of q [H, n, d] over k, v [H, s, d]: normalized output and its log-sum-exp."""
    scores = torch.einsum("hnd,hsd->hns", q.float(), k.float()) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, _NEG)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.einsum("hns,hsd->hnd", torch.exp(scores - lse), v.float()), lse


def cascade_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prefix: int, scale: float
) -> torch.Tensor:
    """Queries of a chunk ([H, n, d]) over an earlier prefix and over themselves, merged by LSE.

    What prefix-cache and chunked-prefill kernels do (vLLM's context attention, cascade attention):
    the cached prefix and the new tokens are two partial softmaxes, each output rounded to the
    model dtype, combined by their fp32 log-sum-exp. The same request computed cold runs one
    softmax over everything, so a warm hit or a chunk boundary changes the rounding of the new
    tokens' attention."""
    n = q.shape[1]
    o1, l1 = _partial_attention(q, k[:, :prefix], v[:, :prefix], scale, None)
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    o2, l2 = _partial_attention(q, k[:, prefix:], v[:, prefix:], scale, causal)
    # Partial outputs are kept in the model dtype and their LSEs in fp32, as cascade kernels'
    # merge-state steps take them.
    o1, o2 = o1.to(q.dtype).float(), o2.to(q.dtype).float()
    m = torch.maximum(l1, l2)
    w1, w2 = torch.exp(l1 - m), torch.exp(l2 - m)
    return ((o1 * w1 + o2 * w2) / (w1 + w2)).to(q.dtype)


def prefill_sdpa(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    m: AttnBatch,
    i: int,
    scale: float,
    cascade: bool = False,
) -> torch.Tensor:
    """One sequence's new queries against its whole cached context with SDPA (causal by position);
    with ``cascade``, a chunk that has a prefix (cached or from an earlier chunk) goes through
    :func:`cascade_attention` instead."""
    n, ctx = m.q_lens[i], m.ctx_lens[i]
    qi = q[m.q_starts[i] : m.q_starts[i] + n]  # [n, H, d]
    table = torch.tensor([m.block_tables[i]], dtype=torch.long, device=q.device)
    k = gather_paged(k_cache, table, ctx)[0].transpose(0, 1)  # [ctx, kvH, d]
    v = gather_paged(v_cache, table, ctx)[0].transpose(0, 1)
    groups = qi.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    if n == ctx:
        o = F.scaled_dot_product_attention(
            qi.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, scale=scale
        )
    elif cascade:
        o = cascade_attention(qi.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), ctx - n, scale)
    else:
        pos_q = torch.arange(ctx - n, ctx, device=q.device)[:, None]
        mask = torch.arange(ctx, device=q.device)[None, :] <= pos_q
        o = F.scaled_dot_product_attention(
            qi.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, scale=scale
        )
    return o.transpose(0, 1)


# --- the per-mode kernel set -----------------------------------------------------------------------


# Catalogue names (reference_kernels.catalogue) of what each mode runs, family by family: the same
# names as the matrix's implementations. Attention prefill in default mode is the engine's own
# per-sequence SDPA (plus the cascade prefix path), which no family signature describes.
INVARIANT_KERNELS = {
    "matmul": "reference",
    "rmsnorm": "reference",
    "softmax": "reference",
    "moe-router": "reference",
    "moe-experts": "reference",
    "attention-prefill": "reference",
    "attention-decode": "reference",
    "allreduce": "reference",  # under --tensor-parallel (engine.tensor_parallel)
}
DEFAULT_KERNELS = {
    "matmul": "torch",  # "mutant:m-bucket-splitk" under gemm_strategy="m-bucket"
    "rmsnorm": "torch",
    "softmax": "torch",
    "moe-router": "torch-topk-sorted",
    "moe-experts": "torch-loop",
    "attention-prefill": "torch-sdpa",
    "attention-decode": "mutant:splitkv-decode-batched",
    "allreduce": "torch-gloo",  # CPU ranks; CUDA ranks: the torch-nccl row of their NCCL configuration
}


def _fp32_log_softmax(fn: Callable) -> Callable:
    return lambda x: fn(x.float())


class Kernels:
    """Kernel set of one engine, taken from the catalogue by name for its mode.

    ``implementations`` maps family -> catalogue name; ``routes`` says the same in words, with the
    engine's parameters (reported by ``info()``). ``units`` overrides :func:`parallel_units` (a
    replay of another process's engine takes its reported ``split_kv_units``)."""

    def __init__(self, cfg: EngineConfig, device: torch.device, kv_heads: int, units: int | None = None):
        self.cfg = cfg
        self.device = device
        self.kv_heads = kv_heads
        self.invariant = cfg.batch_invariant
        self.units = units or parallel_units(device)
        self.max_context = max(64, cfg.model.max_position)  # one split holds any context (split_kv="none")
        self.routes: dict[str, str] = {}
        self.implementations: dict[str, str] = {}
        from ..reference_kernels.attention import write_kv  # an exact copy: no reduction to choose

        # The engine's slots are never negative (padding writes to a spare block): no host check.
        self.write_kv = partial(write_kv, negatives=False)
        self._ref_attn = None
        if self.invariant:
            self._resolve_reference()
        else:
            self._resolve_default()

    def _take(self, family: str, name: str, words: str) -> Callable:
        from ..reference_kernels.catalogue import implementation

        fn = implementation(family, name)
        self.implementations[family] = name
        self.routes[family] = f"{name}: {words}"
        return fn

    def _resolve_default(self) -> None:
        cfg = self.cfg
        gemm = "cuBLAS" if self.device.type == "cuda" else "oneDNN/MKL"
        if cfg.gemm_strategy == "m-bucket":
            fn = self._take("matmul", "mutant:m-bucket-splitk",
                            f"split-K ({cfg.splitk_parts} fp32 partials) at M <= {cfg.splitk_max_m} token rows, "
                            f"one-pass torch F.linear ({gemm}) above")  # fmt: skip
            self.linear = partial(fn, max_m=cfg.splitk_max_m, parts=cfg.splitk_parts)
        else:
            self.linear = self._take("matmul", "torch", f"one-pass torch F.linear ({gemm}) over the step's token batch")
        self.rms_norm = self._take("rmsnorm", "torch", "F.rms_norm")
        self.log_softmax = _fp32_log_softmax(self._take("softmax", "torch", "torch.log_softmax in fp32"))
        self.route = self._take("moe-router", "torch-topk-sorted", "torch softmax + topk")
        self.experts = self._take("moe-experts", "torch-loop", "torch GEMMs per expert over the step's tokens")
        self.implementations["attention-prefill"] = "torch-sdpa"
        self.routes["attention-prefill"] = "torch-sdpa: SDPA per sequence, chunks cut by the step's token budget" + (
            "; a chunk with a prefix (cached or earlier chunk): cascade attention, LSE-merged"
            if cfg.prefix_attention == "cascade" else "")  # fmt: skip
        policy = {
            "auto": f"split count from batch x kv heads vs {self.units} parallel units "
            f"(splits of about >= {cfg.split_kv_min_tokens} tokens)",
            "fixed": f"fixed splits of {cfg.split_kv_size} tokens",
            "none": "one split",
        }[cfg.split_kv]
        if self.device.type == "cuda":  # a split-KV kernel, as GPU engines run (the reference body, cut by batch)
            decode = self._take("attention-decode", "mutant:splitkv-decode", policy + "; Triton split-KV kernel")
            self._decode = partial(decode, sm_count=self.units, min_keys=cfg.split_kv_min_tokens, max_splits=16)
        else:
            decode = self._take("attention-decode", "mutant:splitkv-decode-batched", policy)
            self._decode = partial(decode, sm_count=self.units, min_keys=cfg.split_kv_min_tokens)

    def _resolve_reference(self) -> None:
        """Every reduction through the reference kernels; one that cannot be imported is replaced by
        its stock kernel and named ``FALLBACK`` in the route, never silently."""
        for family, attr, stock in (
            ("matmul", "linear", "torch"),
            ("rmsnorm", "rms_norm", "torch"),
            ("softmax", "log_softmax", "torch"),
            ("moe-router", "route", "torch-topk-sorted"),
            ("moe-experts", "experts", "torch-loop"),
        ):
            try:
                fn = self._take(family, "reference", "reference_kernels")
            except (ImportError, AttributeError, KeyError) as e:
                fn = self._take(family, stock, f"stock FALLBACK (reference not available: {type(e).__name__}: {e})")
            setattr(self, attr, _fp32_log_softmax(fn) if family == "softmax" else fn)
        try:
            from ..reference_kernels import attention as ra

            self._ref_attn = (ra.prefill_paged, ra.decode_paged)
            split = ra.SPLIT_SIZE
            for family in ("attention-prefill", "attention-decode"):
                self.implementations[family] = "reference"
                self.routes[family] = f"reference: paged, split {split} anchored at 0"
        except (ImportError, AttributeError) as e:
            why = f"reference not available: {type(e).__name__}: {e}"
            for family in ("attention-prefill", "attention-decode"):
                self.implementations[family] = "torch-sdpa"
                self.routes[family] = f"torch-sdpa: stock FALLBACK, SDPA per sequence ({why})"

    @property
    def batch_mechanisms(self) -> list[str]:
        """The designed mechanisms that make a row depend on its batch here (empty in invariant mode)."""
        if self.invariant:
            return []
        cfg, out = self.cfg, []
        if cfg.gemm_strategy == "m-bucket":
            out.append(f"gemm m-bucket (split-K x{cfg.splitk_parts} at M <= {cfg.splitk_max_m})")
        if cfg.split_kv == "auto":
            out.append(f"split-KV decode (splits from batch and {self.units} units)")
        if cfg.prefix_attention == "cascade":
            out.append("cascade attention over a cached or earlier-chunk prefix")
        return out

    @property
    def unrouted(self) -> list[str]:
        """Families that run stock code in invariant mode (empty when fully routed or in default mode)."""
        return sorted(k for k, v in self.routes.items() if "FALLBACK" in v)

    def attention(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, m: AttnBatch, scale: float
    ) -> torch.Tensor:
        """Attention of every new token (q [T, H, d]) over its sequence's cached context."""
        if self._ref_attn is not None:
            return self._attention_reference(q, k_cache, v_cache, m, scale)
        if m.all_decode:  # no row gather: the same kernel on the same rows (and capturable)
            return self._decode(q, k_cache, v_cache, m.block_table_tensor, m.decode_ctx, scale=scale,
                                **self._split_args(m))  # fmt: skip
        out = torch.zeros_like(q)  # padding rows (CUDA-graph buckets) stay zero
        decode = set(m.decode_idx) if not self.invariant else set()
        done = self._fresh_prefills_batched(q, k_cache, v_cache, m, scale, out, decode)
        for i in range(len(m.q_lens)):
            if i in decode or i in done:
                continue
            s = m.q_starts[i]
            out[s : s + m.q_lens[i]] = prefill_sdpa(
                q, k_cache, v_cache, m, i, scale, cascade=self.cfg.prefix_attention == "cascade"
            )
        if decode:
            rows = torch.tensor([m.q_starts[i] for i in m.decode_idx], device=q.device)
            out[rows] = self._decode(
                q[rows], k_cache, v_cache, m.block_table_tensor, m.decode_ctx, scale=scale, **self._split_args(m)
            )
        return out

    def _fresh_prefills_batched(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, m: AttnBatch,
                                scale: float, out: torch.Tensor, skip: set[int]) -> set[int]:  # fmt: skip
        """On CUDA, whole prompts (no prefix) of equal length go through one batched SDPA call, as a
        GPU engine's varlen prefill runs them together; the rest stays per sequence. On CPU nothing
        changes (the demo's default-mode bits stay those committed). Returns the items done."""
        if self.device.type != "cuda":
            return set()
        groups: dict[int, list[int]] = {}
        for i, (n, ctx) in enumerate(zip(m.q_lens, m.ctx_lens, strict=True)):
            if i not in skip and n == ctx and n > 1:
                groups.setdefault(n, []).append(i)
        done: set[int] = set()
        for n, items in groups.items():
            if len(items) < 2:
                continue
            dev = q.device
            rows = torch.cat([torch.arange(m.q_starts[i], m.q_starts[i] + n, device=dev) for i in items])
            qs = q[rows].view(len(items), n, *q.shape[1:]).transpose(1, 2)  # [B, H, n, d]
            nblk = -(-n // k_cache.shape[1])  # the blocks holding the prompt (tables may be longer)
            table = torch.tensor([m.block_tables[i][:nblk] for i in items], dtype=torch.long, device=dev)
            k, v = gather_paged(k_cache, table, n), gather_paged(v_cache, table, n)  # [B, kvH, n, d]
            groups_per_kv = q.shape[1] // k.shape[1]
            k = k.repeat_interleave(groups_per_kv, dim=1)
            v = v.repeat_interleave(groups_per_kv, dim=1)
            o = F.scaled_dot_product_attention(qs, k, v, is_causal=True, scale=scale)
            out[rows] = o.transpose(1, 2).reshape(-1, *q.shape[1:])
            done.update(items)
        return done

    def _split_args(self, m: AttnBatch) -> dict:
        """Default-mode decode split arguments: the count a captured graph fixed, else by policy (no count:
        the heuristic), with the longest context from the host lists (no device read)."""
        if self.cfg.split_kv == "fixed":  # splits of split_kv_size keys from position 0, whatever the batch
            return {"split_size": self.cfg.split_kv_size}
        if self.device.type == "cuda" and self.cfg.split_kv == "none":
            # One split as long as the context can be (a size from the batch's longest context would
            # change the Triton kernel's key block below 64 keys, and with it a row's bits).
            return {"split_size": self.max_context}
        max_len = max(m.ctx_lens[i] for i in m.decode_idx)
        if m.decode_splits is not None:
            return {"splits": m.decode_splits, "max_len": max_len}
        return {"splits": 1 if self.cfg.split_kv == "none" else None, "max_len": max_len}

    def graph_splits(self, batch: int, capacity: int) -> int | None:
        """The split count a captured decode graph of ``batch`` rows over a block table of ``capacity``
        tokens fixes for default mode (the heuristic cannot read lengths inside a graph); None in
        invariant mode (the reference splits are anchored at position 0 whatever the batch) and for
        ``split_kv="fixed"`` (the kernels take the split size itself)."""
        if self.invariant or self.cfg.split_kv == "fixed":
            return None
        if self.cfg.split_kv == "none":
            return 1
        from ..reference_kernels.mutants.splitkv_decode import num_splits

        return num_splits(batch, self.kv_heads, capacity, self.units, max_splits=16,
                          min_keys=self.cfg.split_kv_min_tokens)  # fmt: skip

    def _attention_reference(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, m: AttnBatch, scale: float
    ) -> torch.Tensor:
        """Decode rows through `decode_paged`, the rest through `prefill_paged` (bitwise equal by contract)."""
        prefill_paged, decode_paged = self._ref_attn
        out = torch.zeros_like(q)
        dev = q.device
        if m.all_decode:
            return decode_paged(q, k_cache, v_cache, m.block_table_tensor.to(torch.int32),
                                m.decode_ctx.to(torch.int32), scale=scale)  # fmt: skip
        dec = m.decode_idx
        pre = [i for i in range(len(m.q_lens)) if i not in set(dec)]
        if dec:
            rows = torch.tensor([m.q_starts[i] for i in dec], device=dev)
            table = m.block_table_tensor.to(torch.int32)
            out[rows] = decode_paged(
                q[rows], k_cache, v_cache, table, m.decode_ctx.to(torch.int32), scale=scale
            )
        if pre:
            rows = torch.cat(
                [torch.arange(m.q_starts[i], m.q_starts[i] + m.q_lens[i], device=dev) for i in pre]
            )
            width = max(len(m.block_tables[i]) for i in pre)
            table = torch.tensor(
                [m.block_tables[i] + [0] * (width - len(m.block_tables[i])) for i in pre],
                dtype=torch.int32,
                device=dev,
            )
            cu = torch.tensor([0] + [m.q_lens[i] for i in pre], device=dev).cumsum(0).to(torch.int32)
            lens = torch.tensor([m.ctx_lens[i] for i in pre], dtype=torch.int32, device=dev)
            out[rows] = prefill_paged(q[rows], k_cache, v_cache, table, cu, lens, scale=scale)
        return out


def configure_threads(cfg: EngineConfig) -> None:
    """Pin CPU intra-op threads when asked (the split-KV heuristic reads the thread count)."""
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    elif os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
