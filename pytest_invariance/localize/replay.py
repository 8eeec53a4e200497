"""Replay of one bundled-engine step: which op first diverged at a request's first flipped token.

An e2e sweep on the bundled engine in default mode sees a request's k-th generated token (or its
logprob bits) differ between the request alone and inside a batch. The replay rebuilds the
engine's model from its ``/server_info`` (the model config with its seed, hence the same synthetic
weights; dtype, device, every default-mode knob and the split-KV units the server computed), then:

1. recomputes every request's KV cache *alone*, as the engine runs a request alone: its prompt in
   prefill chunks of ``min(chunk_size, max_num_batched_tokens)``, then one decode step per
   generated token before k (so the probe's alone step reproduces the alone run exactly);
2. runs step k (the probe's decode of token k-1; at k = 0 the prefill itself) alone and inside
   the batch's other requests at the same step, under :func:`localize.run.localize`. The probe's
   cache is the same bits in both, so what differs is that step's arithmetic.

The result says which op of that step first differed for the probe row, with its module path,
the kernel the engine runs there (``kernel_implementations``), shapes, dtype and max ULP; and what
the replayed step's greedy token was alone and batched. A replay that finds no culprit says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from .bundled import BundledLM, _Proxy, before_run
from .run import localize

# EngineConfig fields a server reports that decide the default-mode step's arithmetic.
KNOBS = ("gemm_strategy", "splitk_max_m", "splitk_parts", "split_kv", "split_kv_size", "split_kv_min_tokens",
         "prefix_attention", "block_size", "chunk_size", "max_num_batched_tokens")  # fmt: skip
# The kernel call a module path names (bundled.DENSE / MOE order) -> the family the engine picks for it.
FAMILY = {"qkv_proj": "matmul", "o_proj": "matmul", "gate_up_proj": "matmul", "down_proj": "matmul",
          "lm_head": "matmul", "gate": "matmul", "input_layernorm": "rmsnorm", "post_attention_layernorm": "rmsnorm",
          "norm": "rmsnorm", "router": "moe-router", "experts": "moe-experts"}  # fmt: skip
DEADLINE_S = 60.0


class ReplayUnsupported(ValueError):
    """This step cannot be replayed faithfully here (one line: the reason the record carries)."""


@dataclass(frozen=True)
class Request:
    """One request at the replayed step: its prompt and the tokens it had generated before it."""

    prompt: tuple[int, ...]
    generated: tuple[int, ...]

    @property
    def context(self) -> int:
        """Tokens in the cache after the step."""
        return len(self.prompt) + len(self.generated)


def _meta(items: list[tuple[list[int], int, int]], bs: int, dev: torch.device) -> Any:
    """``AttnBatch`` of sequences ``(block_table, start, n)`` as the engine's ModelRunner builds it."""
    from pytest_invariance.engine.kernels import AttnBatch

    meta = AttnBatch([], [], [], [], torch.empty(0))
    slots: list[int] = []
    for i, (table, start, n) in enumerate(items):
        meta.q_starts.append(sum(it[2] for it in items[:i]))
        meta.q_lens.append(n)
        meta.ctx_lens.append(start + n)
        meta.block_tables.append(table)
        if n == 1 and start > 0:
            meta.decode_idx.append(i)
        slots += [table[p // bs] * bs + p % bs for p in range(start, start + n)]
    meta.slot_mapping = torch.tensor(slots, dtype=torch.long, device=dev)
    if meta.decode_idx:
        width = max(len(meta.block_tables[i]) for i in meta.decode_idx)
        rows = [meta.block_tables[i] + [0] * (width - len(meta.block_tables[i])) for i in meta.decode_idx]
        meta.block_table_tensor = torch.tensor(rows, dtype=torch.long, device=dev)
        meta.decode_ctx = torch.tensor([meta.ctx_lens[i] for i in meta.decode_idx], device=dev)
    return meta


class BundledStep(BundledLM):
    """``forward(rows[B, 1]) -> logits[B, V]``: one engine step of the requests ``rows`` index.

    Every request is a decode (it had generated tokens) or, at token 0, a whole-prompt prefill of
    the probe's length, so each contributes the same number of token rows and the probe's rows are
    a block of every activation (``rows``). Its cache is copied in from what it computed alone."""

    def __init__(self, model_cfg: Any, requests: list[Request], *, device: str, units: int | None,
                 **engine: Any) -> None:  # fmt: skip
        super().__init__(model_cfg, invariant=False, device=device, units=units, **engine)
        self.requests = requests
        self.decode = bool(requests[0].generated)
        if any(bool(r.generated) != self.decode for r in requests):
            raise ReplayUnsupported("the batch mixes requests at their prefill and at a decode step")
        if not self.decode and len({len(r.prompt) for r in requests}) > 1:
            raise ReplayUnsupported("the first token flipped at a prefill step whose prompts differ in length")
        self._kv: dict[Request, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def _shape(self, blocks: int) -> tuple[int, ...]:
        c = self.model.m.cfg
        return (blocks, self.cfg.block_size, c.kv_heads, c.head_dim)

    def _alone(self, r: Request, deadline: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``r``'s cache before the step, computed as the engine computes a request alone."""
        if r in self._kv:
            return self._kv[r]
        m, bs, dev = self.model.m, self.cfg.block_size, self.model.m.device
        known = list(r.prompt) + list(r.generated[:-1])
        blocks = max(1, -(-(len(known) + 1) // bs))
        kv = [(torch.zeros(self._shape(blocks + 1), dtype=m.embed.dtype, device=dev),
               torch.zeros(self._shape(blocks + 1), dtype=m.embed.dtype, device=dev)) for _ in range(m.cfg.layers)]  # fmt: skip
        table = list(range(blocks))
        chunk = max(1, min(self.cfg.chunk_size, self.cfg.max_num_batched_tokens))
        steps = [(s, min(chunk, len(r.prompt) - s)) for s in range(0, len(r.prompt), chunk)] if self.decode else []
        steps += [(p, 1) for p in range(len(r.prompt), len(known))]
        with torch.no_grad():
            for start, n in steps:
                if time.monotonic() > deadline:
                    raise ReplayUnsupported(f"the replay's cache rebuild ran past {DEADLINE_S:g} s")
                ids = torch.tensor(known[start : start + n], dtype=torch.long, device=dev)
                pos = torch.arange(start, start + n, device=dev)
                m.forward(self.kernels, ids, pos, _meta([(table, start, n)], bs, dev), kv)
        self._kv[r] = kv
        return kv

    def prepare(self, deadline: float) -> None:
        """Every request's alone cache, before any traced run."""
        for r in self.requests:
            self._alone(r, deadline)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        m, bs, dev = self.model.m, self.cfg.block_size, self.model.m.device
        reqs = [self.requests[int(i)] for i in rows.reshape(-1).tolist()]
        b = len(reqs)
        nb = max(-(-r.context // bs) for r in reqs)
        # The probe takes cache blocks 0.. (its tables equal alone and batched), the others follow.
        group = [0 if i == self.probe_position else 1 + i - (i > self.probe_position) for i in range(b)]
        tables = [[g * nb + j for j in range(-(-r.context // bs))] for g, r in zip(group, reqs, strict=True)]
        kv = [(torch.zeros(self._shape(b * nb + 1), dtype=m.embed.dtype, device=dev),
               torch.zeros(self._shape(b * nb + 1), dtype=m.embed.dtype, device=dev)) for _ in range(m.cfg.layers)]  # fmt: skip
        for r, table in zip(reqs, tables, strict=True):
            for (k, v), (k0, v0) in zip(kv, self._kv[r], strict=True):
                k[table] = k0[: len(table)]
                v[table] = v0[: len(table)]
        if self.decode:
            items = [(t, r.context - 1, 1) for t, r in zip(tables, reqs, strict=True)]
            ids = [r.generated[-1] for r in reqs]
        else:
            items = [(t, 0, len(r.prompt)) for t, r in zip(tables, reqs, strict=True)]
            ids = [tok for r in reqs for tok in r.prompt]
        meta = _meta(items, bs, dev)
        positions = torch.tensor([p for _, s, n in items for p in range(s, s + n)], device=dev)
        proxy = _Proxy(self)
        hidden = m.forward(proxy, torch.tensor(ids, dtype=torch.long, device=dev), positions, meta, kv)
        last = torch.tensor([s + n - 1 for s, n in zip(meta.q_starts, meta.q_lens, strict=True)], device=dev)
        return m.logits(proxy, hidden[last])


def engine_model(info: dict) -> tuple[Any, dict]:
    """The model config and engine knobs a ``/server_info`` reports (ReplayUnsupported: not replayable)."""
    from pytest_invariance.engine.config import ModelConfig

    if info.get("engine") != "bundled" or info.get("mode") != "default":
        raise ReplayUnsupported("only the bundled engine in default mode is replayed")
    if not str(info.get("weights") or "").startswith("synthetic"):
        raise ReplayUnsupported(f"weights {info.get('weights')!r}: only synthetic weights are rebuilt here")
    for key, off in (("tp_size", 1), ("speculative", "off"), ("shared_rng", False), ("cuda_graph_buckets", [])):
        if info.get(key, off) not in (off, None):
            raise ReplayUnsupported(f"{key}={info[key]!r} is not replayed")
    if not isinstance(info.get("model_config"), dict):
        raise ReplayUnsupported("the server reported no model_config")
    missing = [k for k in KNOBS if k not in info]
    if missing:
        raise ReplayUnsupported(f"the server reported no {', '.join(missing)}")
    return ModelConfig(**info["model_config"]), {k: info[k] for k in KNOBS}


def kernel_of(path: str, info: dict, decode: bool) -> tuple[str | None, str | None]:
    """(family, kernel implementation) the engine runs at a module path of :class:`BundledLM`."""
    leaf = path.rsplit(".", 1)[-1]
    family = ("attention-decode" if decode else "attention-prefill") if leaf == "attn" else FAMILY.get(leaf)
    impl = (info.get("kernel_implementations") or {}).get(family) if family else None
    return family, impl


def replay_step(info: dict, probe: Request, others: list[Request], position: int, *,
                deadline_s: float = DEADLINE_S) -> dict:  # fmt: skip
    """The step at which ``probe`` first differed, alone vs with ``others`` (the probe at ``position``):
    the first op that diverged, or the reason none was named. Raises ReplayUnsupported."""
    t0 = time.monotonic()
    mcfg, knobs = engine_model(info)
    threads = torch.get_num_threads()
    if info.get("num_threads") and str(info.get("device", "cpu")).startswith("cpu"):
        torch.set_num_threads(int(info["num_threads"]))  # the engine's GEMM blocking follows its threads
    try:
        requests = [probe, *others]
        lm = BundledStep(mcfg, requests, device=str(info.get("device") or "cpu"),
                         units=info.get("split_kv_units"), **knobs)  # fmt: skip
        lm.prepare(t0 + deadline_s)
        n = len(requests)
        dev = torch.device(str(info.get("device") or "cpu"))
        rows = torch.arange(n, device=dev)[:, None]
        res = localize(lm, rows[0], rows[1:], batch_sizes=(1, n), positions=[position], before_run=before_run)
        tokens = _greedy(lm, rows, position)
    finally:
        torch.set_num_threads(threads)
    out: dict[str, Any] = {
        "step": "decode" if lm.decode else "prefill", "token_index": len(probe.generated),
        "batch_size": n, "position": position, **tokens,
        "ops": res.ops, "seconds": round(time.monotonic() - t0, 3),
    }  # fmt: skip
    top = res.culprit
    if res.nondeterministic:
        out["reason"] = "the replayed step is not deterministic alone (batch 1 differed from itself)"
    elif top is None:
        out["reason"] = ("no op differed for the probe row in the replayed step" if not res.diverged
                         else "the probe row differed but no op could be named (unknown layouts)")  # fmt: skip
    if top is not None:
        family, impl = kernel_of(top["module"], info, lm.decode)
        out["culprit"] = {"module": top["module"], "op": top["op"], "family": family, "kernel": impl,
                          "in_shapes": top["in_shapes"], "out_shapes": top["out_shapes"], "dtype": top["dtype"],
                          "max_ulp": top["max_ulp"], "n_diff": top["n_diff"], "numel": top["numel"],
                          "via": top["via"], "unverified_inputs": top["unverified_inputs"],
                          "batch_sizes": top["batch_sizes"]}  # fmt: skip
    return out


def _greedy(lm: BundledStep, rows: torch.Tensor, position: int) -> dict:
    """The replayed step's greedy token for the probe alone and batched (lowest index on a tie, as
    the engine's sampler), and whether its logits were bitwise equal."""
    n = rows.shape[0]
    with torch.no_grad():
        before_run(lm, 1, 0)
        alone = lm(rows[:1])[0]
        before_run(lm, n, position)
        order = torch.cat([rows[1 : position + 1], rows[:1], rows[position + 1 :]])
        batched = lm(order)[position]
    return {"alone_token": int(alone.argmax()), "batched_token": int(batched.argmax()),
            "logits_equal": bool(torch.equal(alone.view(torch.int32), batched.view(torch.int32)))}  # fmt: skip
