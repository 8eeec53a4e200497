"""The one place where the engine picks its kernels: stock torch or `reference_kernels`, per mode.

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

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

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


def parallel_units(device: torch.device) -> int:
    """Work units a split-KV heuristic tries to fill: SMs on CUDA; on CPU intra-op threads x 16 (a CPU
    decode kernel cuts the KV so every thread has several chunks to balance). On a 2-core host with
    4 KV heads that is 8 splits at batch 1, 4 at 2, 2 at 4 and 1 from 8 (capped by context length)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, torch.get_num_threads()) * 16


def auto_num_splits(batch: int, kv_heads: int, max_ctx: int, units: int, min_split: int = 16) -> int:
    """Flash-decoding style split count: enough (batch x kv_head x split) programs to fill `units`."""
    by_occupancy = math.ceil(units / max(1, batch * kv_heads))
    return max(1, min(by_occupancy, max_ctx // min_split, 16))


# --- stock implementations -------------------------------------------------------------------------


def stock_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    return F.linear(x, w, b)


def splitk_linear(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, parts: int = 4
) -> torch.Tensor:
    """Split-K GEMM: K cut into ``parts`` slices, each slice's product in fp32, the partials summed
    in slice order, one rounding to the model dtype at the end (a split-K workspace reduction).

    Every element sums the same K terms as the one-pass GEMM, in another order, so its fp32 value
    differs in the low bits and some elements round to a different bf16: a row's bits then depend
    on which side of the M bucket edge its step fell, whatever the host's BLAS does."""
    acc: torch.Tensor | None = None
    for xs, ws in zip(x.tensor_split(parts, dim=-1), w.tensor_split(parts, dim=-1), strict=True):
        part = _fp32_product(xs, ws)
        acc = part if acc is None else acc + part
    assert acc is not None
    if b is not None:
        acc = acc + b.float()
    return acc.to(x.dtype)


def _fp32_product(xs: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    """``xs @ ws.T`` as an fp32 partial: on CUDA straight from the 16-bit operands where torch
    offers ``out_dtype`` (no fp32 copy of the weights), elsewhere on fp32 copies (CPU BLAS has no
    16-bit-in, fp32-out GEMM)."""
    if xs.is_cuda and xs.dtype in (torch.bfloat16, torch.float16):
        try:
            return torch.mm(xs, ws.t(), out_dtype=torch.float32)
        except (TypeError, RuntimeError, NotImplementedError):
            pass
    return F.linear(xs.float(), ws.float())


def m_bucket_linear(max_m: int, parts: int) -> Callable[..., torch.Tensor]:
    """The default-mode GEMM: split-K at ``M <= max_m`` token rows, one stock pass above."""

    def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        if x.shape[0] <= max_m:
            return splitk_linear(x, w, b, parts)
        return F.linear(x, w, b)

    return linear


def stock_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * w.float()).to(x.dtype)


def stock_log_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x.float(), dim=-1)


def stock_route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits.float(), dim=-1)
    w, ids = torch.topk(probs, top_k, dim=-1)
    return w / w.sum(-1, keepdim=True), ids


def stock_experts(
    x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """Grouped experts: each expert's GEMM runs over however many tokens chose it in this step."""
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    inter = w_down.shape[-1]
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        gu = F.linear(x[tok], w_gate_up[e])
        act = F.silu(gu[:, :inter]) * gu[:, inter:]
        y = F.linear(act, w_down[e]).float()
        out.index_add_(0, tok, y * weights[tok, slot].float()[:, None])
    return out.to(x.dtype)


def write_kv_stock(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor
) -> None:
    """Scatter the step's new K/V ([T, kvH, d]) into the paged cache ([blocks, block, kvH, d])."""
    k_cache.view(-1, *k_cache.shape[2:])[slots] = k
    v_cache.view(-1, *v_cache.shape[2:])[slots] = v


def _gather(cache: torch.Tensor, table: list[int], n: int) -> torch.Tensor:
    """The first n cached positions of one sequence: [n, kvH, d]."""
    idx = torch.tensor(table, dtype=torch.long, device=cache.device)
    return cache[idx].reshape(-1, *cache.shape[2:])[:n]


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
    k = _gather(k_cache, m.block_tables[i], ctx)
    v = _gather(v_cache, m.block_tables[i], ctx)
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


def decode_split_kv(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    ctx: torch.Tensor,
    num_splits: int,
    scale: float,
) -> torch.Tensor:
    """Batched flash-decoding: q [B, H, d] over padded paged K/V cut into `num_splits` partial softmaxes."""
    b, h, d = q.shape
    k = k_cache[tables].reshape(b, -1, *k_cache.shape[2:])  # [B, S, kvH, d]
    v = v_cache[tables].reshape(b, -1, *v_cache.shape[2:])
    s_len, kvh = k.shape[1], k.shape[2]
    g = h // kvh
    qf = q.float().view(b, kvh, g, d)
    scores = torch.einsum("bhgd,bshd->bhgs", qf, k.float()) * scale
    valid = torch.arange(s_len, device=q.device)[None, :] < ctx[:, None]
    scores = scores.masked_fill(~valid[:, None, None, :], _NEG)
    if num_splits <= 1:  # one pass: one softmax over the whole context, one rounding
        p = torch.softmax(scores, dim=-1)
        return torch.einsum("bhgs,bshd->bhgd", p, v.float()).reshape(b, h, d).to(q.dtype)
    split = math.ceil(s_len / num_splits)
    outs, maxes, sums = [], [], []
    for s0 in range(0, s_len, split):
        sc = scores[..., s0 : s0 + split]
        mx = sc.amax(-1, keepdim=True)
        p = torch.exp(sc - mx)
        sm = p.sum(-1, keepdim=True)
        # Each split's normalized output is stored in the model dtype (as paged-attention v2 keeps
        # its tmp_out), with its max and exp-sum in fp32 for the merge.
        o = torch.einsum("bhgs,bshd->bhgd", p, v[:, s0 : s0 + split].float()) / sm.clamp_min(1e-30)
        outs.append(o.to(q.dtype).float())
        sums.append(sm)
        maxes.append(mx)
    m_all = torch.stack(maxes).amax(0)
    w = [sm * torch.exp(mx - m_all) for sm, mx in zip(sums, maxes, strict=True)]
    num = sum(o * wi for o, wi in zip(outs, w, strict=True))
    return (num / sum(w)).reshape(b, h, d).to(q.dtype)


# --- the per-mode kernel set -----------------------------------------------------------------------


def _try(fn: Callable[[], Callable], fallback: Callable, label: str, routes: dict, key: str) -> Callable:
    """Resolve a reference kernel; on ImportError / AttributeError use `fallback` and say so."""
    try:
        f = fn()
    except (ImportError, AttributeError) as e:
        routes[key] = f"stock FALLBACK (reference not available: {type(e).__name__}: {e})"
        return fallback
    routes[key] = label
    return f


class Kernels:
    """Kernel set of one engine. `routes` names what runs for each family (reported by `info()`)."""

    def __init__(self, cfg: EngineConfig, device: torch.device, kv_heads: int):
        self.cfg = cfg
        self.device = device
        self.kv_heads = kv_heads
        self.invariant = cfg.batch_invariant
        self.units = parallel_units(device)
        self.routes: dict[str, str] = {}
        if not self.invariant:
            gemm = "cuBLAS" if device.type == "cuda" else "oneDNN/MKL"
            if cfg.gemm_strategy == "m-bucket":
                self.linear = m_bucket_linear(cfg.splitk_max_m, cfg.splitk_parts)
                matmul = (f"m-bucket: split-K ({cfg.splitk_parts} fp32 partials) at M <= {cfg.splitk_max_m} "
                          f"token rows, one-pass torch F.linear ({gemm}) above")  # fmt: skip
            else:
                self.linear = stock_linear
                matmul = f"one-pass torch F.linear ({gemm}) over the step's token batch"
            self.rms_norm = stock_rms_norm
            self.log_softmax = stock_log_softmax
            self.route = stock_route
            self.experts = stock_experts
            self.write_kv = write_kv_stock
            self.routes = {
                "matmul": matmul,
                "rmsnorm": "torch eager",
                "softmax": "torch log_softmax",
                "attention-prefill": "torch SDPA per sequence, chunks cut by the step's token budget"
                + ("; a chunk with a prefix (cached or earlier chunk): cascade attention, LSE-merged"
                   if cfg.prefix_attention == "cascade" else ""),  # fmt: skip
                "attention-decode": f"split-KV, split count from batch and {self.units} parallel units "
                f"(splits of >= {cfg.split_kv_min_tokens} tokens)"
                if cfg.split_kv == "auto"
                else f"split-KV policy {cfg.split_kv}",
                "moe-router": "torch softmax + topk",
                "moe-experts": "torch grouped GEMM per expert over the step's tokens",
            }
            self._ref_attn = None
            return
        self._resolve_reference()

    def _resolve_reference(self) -> None:
        from .. import reference_kernels as rk  # noqa: F401  (package must exist)

        r = self.routes

        def lin():
            from ..reference_kernels.matmul import linear

            return lambda x, w, b=None: linear(x, w, b)

        def rms():
            from ..reference_kernels.rowops import rms_norm

            return lambda x, w, eps: rms_norm(x, w, eps)

        def lsm():
            from ..reference_kernels.rowops import log_softmax

            return lambda x: log_softmax(x.float(), -1)

        def route():
            from ..reference_kernels.moe import route as _route

            return lambda logits, k: _route(logits.float(), k)

        def experts():
            from ..reference_kernels.moe import fused_experts

            return fused_experts

        self.linear = _try(lin, stock_linear, "reference_kernels.matmul.linear", r, "matmul")
        self.rms_norm = _try(rms, stock_rms_norm, "reference_kernels.rowops.rms_norm", r, "rmsnorm")
        self.log_softmax = _try(lsm, stock_log_softmax, "reference_kernels.rowops.log_softmax", r, "softmax")
        self.route = _try(route, stock_route, "reference_kernels.moe.route", r, "moe-router")
        self.experts = _try(experts, stock_experts, "reference_kernels.moe.fused_experts", r, "moe-experts")
        self._ref_attn = None
        try:
            from ..reference_kernels import attention as ra

            self._ref_attn = (ra.prefill_paged, ra.decode_paged)
            self.write_kv = ra.write_kv
            split = ra.SPLIT_SIZE
            r["attention-prefill"] = (
                f"reference_kernels.attention.prefill_paged (split {split} anchored at 0)"
            )
            r["attention-decode"] = f"reference_kernels.attention.decode_paged (split {split} anchored at 0)"
            r["kv-write"] = "reference_kernels.attention.write_kv"
        except (ImportError, AttributeError) as e:
            self.write_kv = write_kv_stock
            why = f"reference not available: {type(e).__name__}: {e}"
            r["attention-prefill"] = f"stock FALLBACK: SDPA per sequence ({why})"
            r["attention-decode"] = f"stock FALLBACK: SDPA per sequence ({why})"

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
        out = torch.zeros_like(q)  # padding rows (CUDA-graph buckets) stay zero
        decode = set(m.decode_idx) if not self.invariant else set()
        for i in range(len(m.q_lens)):
            if i in decode:
                continue
            s = m.q_starts[i]
            out[s : s + m.q_lens[i]] = prefill_sdpa(
                q, k_cache, v_cache, m, i, scale, cascade=self.cfg.prefix_attention == "cascade"
            )
        if decode:
            rows = torch.tensor([m.q_starts[i] for i in m.decode_idx], device=q.device)
            max_ctx = max(m.ctx_lens[i] for i in m.decode_idx)
            if self.cfg.split_kv == "auto":
                splits = auto_num_splits(
                    len(m.decode_idx), self.kv_heads, max_ctx, self.units, self.cfg.split_kv_min_tokens
                )
            elif self.cfg.split_kv == "fixed":
                splits = max(1, math.ceil(max_ctx / self.cfg.split_kv_size))
            else:
                splits = 1
            out[rows] = decode_split_kv(
                q[rows], k_cache, v_cache, m.block_table_tensor, m.decode_ctx, splits, scale
            )
        return out

    def _attention_reference(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, m: AttnBatch, scale: float
    ) -> torch.Tensor:
        """Decode rows through `decode_paged`, the rest through `prefill_paged` (bitwise equal by contract)."""
        prefill_paged, decode_paged = self._ref_attn
        out = torch.zeros_like(q)
        dev = q.device
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
