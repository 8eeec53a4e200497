"""LLMEngine: requests in, one scheduler step at a time, tokens out. The offline `LLM` and the HTTP
server both drive this same loop."""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass

import torch

from .block_manager import BlockManager
from .config import EngineConfig, ModelConfig
from .kernels import Kernels, configure_threads
from .model import Model
from .model_runner import ModelRunner
from .sampler import Sampler, SamplingParams, top_logprobs
from .scheduler import Scheduled, Scheduler
from .sequence import Sequence, Status
from .speculative import SpecStats, accepted_tokens
from .tokenizer import load_tokenizer
from .weights import load_hf_weights, synthetic_weights, torch_dtype

_SEED_MIX = 0x5851F42D4C957F2D


@dataclass
class StepOutput:
    """One new token of one request (or its abort: token_id -1, logprob nan)."""

    request_id: str
    token_id: int
    logprob: float
    top_logprobs: list[tuple[int, float]]
    finished: bool
    finish_reason: str | None  # "length" | "stop" | "abort"
    prompt_logprobs: list[float | None] | None = None  # first output only; None at position 0
    prompt_top_logprobs: list[list[tuple[int, float]] | None] | None = None
    cached_tokens: int = 0  # prompt tokens this request took from the prefix cache


def _kv_budget_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * 0.5)
    # 256 MiB on CPU: the demo's 8192 blocks (131072 tokens), as when its context was 2048; the
    # 8192 context would otherwise zero 1 GiB per engine start (several run at once in the tests).
    return 1 << 28


def _row_logprobs(
    logprobs: torch.Tensor | None, params: list[SamplingParams], tokens: list[int]
) -> list[tuple[float, list[tuple[int, float]]]]:
    """Each row's chosen-token logprob and top alternatives (nan, [] where not asked), read from the
    device in one gather and one sort for the whole step rather than per row."""
    out: list[tuple[float, list[tuple[int, float]]]] = [(float("nan"), [])] * len(params)
    want = [r for r, p in enumerate(params) if p.logprobs is not None]
    if logprobs is None or not want:
        return out
    rows = torch.tensor(want, device=logprobs.device)
    picked = logprobs[rows, torch.tensor([tokens[r] for r in want], device=logprobs.device)].tolist()
    tops = top_logprobs(logprobs[rows], max(params[r].logprobs or 0 for r in want))
    for j, r in enumerate(want):
        out[r] = (picked[j], tops[j][: params[r].logprobs])
    return out


class LLMEngine:
    def __init__(self, config: EngineConfig):
        self.config = cfg = config
        configure_threads(cfg)
        if cfg.model_path:
            mcfg = ModelConfig.from_hf_dir(cfg.model_path)
            mcfg.dtype = cfg.model.dtype if cfg.model.dtype != ModelConfig.dtype else mcfg.dtype
            cfg.model = mcfg
        if cfg.tensor_parallel > 1:  # before any weight is built: a refusal (no GPUs, no split) costs nothing
            from .tensor_parallel import check_shardable

            check_shardable(cfg)
        mcfg = cfg.model
        if cfg.model_path:
            weights = load_hf_weights(cfg.model_path, mcfg)
            self.weights_source = f"safetensors:{cfg.model_path}"
        else:
            weights = synthetic_weights(mcfg, cfg.device)
            self.weights_source = f"synthetic(seed={mcfg.seed}, splitmix64)"
        self.device = torch.device(cfg.device)
        self.model = Model(mcfg, weights, self.device)
        self.kernels = Kernels(cfg, self.device, mcfg.kv_heads)
        self.tokenizer = load_tokenizer(
            cfg.tokenizer_path, cfg.model_path, mcfg.eos_token_id, mcfg.bos_token_id
        )
        if self.tokenizer.vocab_size > mcfg.vocab_size:
            raise ValueError(
                f"tokenizer has {self.tokenizer.vocab_size} tokens, model only {mcfg.vocab_size}"
            )
        blocks_per_seq = math.ceil(mcfg.max_position / cfg.block_size)
        block_bytes = (
            2
            * mcfg.layers
            * cfg.block_size
            * mcfg.kv_heads
            * mcfg.head_dim
            * torch_dtype(mcfg.dtype).itemsize
        )
        num_blocks = cfg.num_blocks or max(
            blocks_per_seq,
            min(cfg.max_num_seqs * blocks_per_seq, _kv_budget_bytes(self.device) // block_bytes),
        )
        self.num_blocks = num_blocks
        self.blocks = BlockManager(num_blocks, cfg.block_size, cfg.enable_prefix_cache)
        self.scheduler = Scheduler(cfg, self.blocks)
        runner = ModelRunner
        if cfg.tensor_parallel > 1:
            from .tensor_parallel import TPModelRunner as runner
        self.runner = runner(cfg, self.model, self.kernels, num_blocks)
        gen = None
        if cfg.shared_rng:
            gen = torch.Generator().manual_seed(mcfg.seed)
        self.sampler = Sampler(gen)
        self.seqs: dict[str, Sequence] = {}
        self._arrivals = 0
        self._aborted: list[StepOutput] = []
        self.last_step_stats: dict = {
            "batch_size": 0,
            "num_tokens": 0,
            "num_prefill": 0,
            "num_decode": 0,
            "waiting": 0,
        }
        self.total_steps = 0
        self.spec_stats = SpecStats()

    # --- requests ------------------------------------------------------------------------------

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Queue a request; ValueError (message names the problem) for anything the engine cannot run."""
        m = self.model.cfg
        if request_id in self.seqs:
            raise ValueError(f"duplicate request_id {request_id!r}")
        ids = list(prompt_token_ids)
        if not ids:
            raise ValueError("prompt is empty")
        bad = [t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < m.vocab_size]
        if bad:
            raise ValueError(f"prompt token ids outside the vocabulary [0, {m.vocab_size}): {bad[:5]}")
        if len(ids) + params.max_tokens > m.max_position:
            raise ValueError(
                f"prompt ({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the context length {m.max_position}"
            )
        if -(-(len(ids) + params.max_tokens) // self.config.block_size) > self.num_blocks:
            raise ValueError(f"request needs more KV blocks than the cache holds ({self.num_blocks})")
        if self.config.spec.enabled and not params.greedy and self.config.shared_rng:
            raise ValueError(
                f"speculative decoding ({self.config.speculative}) with sampling (temperature "
                f"{params.temperature}) under the shared engine-wide RNG (--shared-rng) is refused: "
                "verifying drafts would draw that stream in another order than plain decoding; "
                "use temperature 0, or serve without one of the two"
            )
        seed = (
            params.seed
            if params.seed is not None
            else (self._arrivals * _SEED_MIX + m.seed) & 0xFFFFFFFFFFFFFFFF
        )
        seq = Sequence(request_id, ids, params, arrival=self._arrivals, seed=seed)
        self._arrivals += 1
        self.seqs[request_id] = seq
        self.scheduler.add(seq)

    def abort(self, request_id: str) -> None:
        """Drop a request; its abort is reported by the next `step()`. Unknown ids are ignored."""
        seq = self.seqs.pop(request_id, None)
        if seq is None:
            return
        self.scheduler.remove(seq)
        seq.status = Status.FINISHED
        seq.finish_reason = "abort"
        self._aborted.append(StepOutput(request_id, -1, float("nan"), [], True, "abort"))

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work() or bool(self._aborted)

    def flush_cache(self) -> bool:
        """Forget cached prefixes (always possible: blocks in use stay with their sequences)."""
        self.blocks.flush()
        return True

    # --- the loop ------------------------------------------------------------------------------

    def step(self) -> list[StepOutput]:
        """One scheduler step: admit, run one mixed forward, sample, finish."""
        outputs, self._aborted = self._aborted, []
        items = self.scheduler.schedule()
        n_pre = sum(1 for it in items if not it.is_decode)
        self.last_step_stats = {
            "batch_size": len(items),
            "num_tokens": sum(it.n for it in items),
            "num_prefill": n_pre,
            "num_decode": len(items) - n_pre,
            "waiting": len(self.scheduler.waiting),
        }
        if not items:
            return outputs
        res = self.runner.run(items)
        self.last_step_stats["num_tokens_padded"] = res.num_tokens
        self.last_step_stats["graph"] = res.graph
        self.total_steps += 1
        for i, it in enumerate(items):
            if it.draft:
                continue  # advanced by what its verification accepts
            it.seq.num_computed += it.n
            self.blocks.commit(it.seq)
            if i in res.prompt_logits:
                self._prompt_logprobs(it.seq, res.prompt_logits[i])
        for i, logits in res.verify_logits.items():
            outputs.extend(self._verify(items[i], logits))
        if not res.sample_items:
            return outputs
        seqs = [items[i].seq for i in res.sample_items]
        params = [s.params for s in seqs]
        tokens = self.sampler(res.sample_logits, params, [s.seed for s in seqs], [s.num_tokens for s in seqs])
        want_lp = any(p.logprobs is not None for p in params)
        logprobs = self.kernels.log_softmax(res.sample_logits) if want_lp else None
        for seq, tok, (lp, top) in zip(seqs, tokens, _row_logprobs(logprobs, params, tokens), strict=True):
            outputs.append(self._emit(seq, tok, lp, top))
        return outputs

    def _emit(self, seq: Sequence, tok: int, lp: float, top: list[tuple[int, float]]) -> StepOutput:
        """Append one sampled token (with its logprob and top alternatives) and finish the sequence if it ends."""
        seq.token_ids.append(tok)
        reason = self._finish_reason(seq, tok)
        out = StepOutput(seq.request_id, tok, lp, top, reason is not None, reason,
                         cached_tokens=seq.num_cached_prefix)  # fmt: skip
        if seq.prompt_logprobs is not None and not seq.prompt_logprobs_sent:
            out.prompt_logprobs = seq.prompt_logprobs
            out.prompt_top_logprobs = seq.prompt_top_logprobs
            seq.prompt_logprobs_sent = True
        if reason is not None:
            seq.status = Status.FINISHED
            seq.finish_reason = reason
            self.scheduler.remove(seq)
            self.seqs.pop(seq.request_id, None)
        return out

    def _verify(self, it: Scheduled, logits: torch.Tensor) -> list[StepOutput]:
        """Accept the drafts the target agrees with (each row sampled as plain decoding would at its
        position), emit them and the target's next token, and roll the rejected positions' KV back."""
        seq, draft = it.seq, list(it.draft)
        rows = len(draft) + 1
        target = self.sampler(logits, [seq.params] * rows, [seq.seed] * rows,
                              [seq.num_tokens + j for j in range(rows)])  # fmt: skip
        new = accepted_tokens(target, draft)
        self.spec_stats.verify_steps += 1
        self.spec_stats.draft_tokens += len(draft)
        self.spec_stats.accepted_tokens += len(new) - 1
        seq.num_computed = it.start + len(new)  # the last token and the accepted drafts have valid KV
        logprobs = self.kernels.log_softmax(logits) if seq.params.logprobs is not None else None
        outs = []
        for tok, (lp, top) in zip(new, _row_logprobs(logprobs, [seq.params] * len(new), new), strict=True):
            outs.append(self._emit(seq, tok, lp, top))
            if outs[-1].finished:
                return outs
        self.blocks.truncate(seq, seq.num_computed)
        self.blocks.commit(seq)
        return outs

    def _prompt_logprobs(self, seq: Sequence, logits: torch.Tensor) -> None:
        lp = self.kernels.log_softmax(logits)
        first = len(seq.prompt_logprobs)  # prompt position scored by the first row
        targets = torch.tensor(
            seq.prompt_ids[first : first + lp.shape[0]], dtype=torch.long, device=lp.device
        )
        scored = lp.gather(1, targets.clamp(max=lp.shape[1] - 1)[:, None])[:, 0]
        scored[targets >= lp.shape[1]] = -math.inf  # a reserved id: the LM head never scores it
        seq.prompt_logprobs.extend(scored.tolist())
        seq.prompt_top_logprobs.extend(top_logprobs(lp, seq.params.prompt_logprobs or 0))

    def _finish_reason(self, seq: Sequence, tok: int) -> str | None:
        p = seq.params
        eos = self.tokenizer.eos_token_id
        if tok in p.stop_token_ids or (not p.ignore_eos and eos is not None and tok == eos):
            return "stop"
        if len(seq.output_ids) >= p.max_tokens or seq.num_tokens >= self.model.cfg.max_position:
            return "length"
        return None

    # --- reporting -----------------------------------------------------------------------------

    def _graphs_info(self) -> dict:
        """How decode steps run: captured graphs, static-buffer replay (CPU), or eager."""
        graphs = self.runner.graphs
        if graphs is None:
            why = self.runner.eager_why
            return {"mode": self.config.cuda_graphs, "decode": "eager", **({"eager_why": why} if why else {})}
        how = "cuda graphs" if graphs.capture else "static buffers, no capture (CPU)"
        return {"mode": self.config.cuda_graphs, "decode": how, **graphs.info()}

    def info(self) -> dict:
        """Everything that decides a request's numerics: model, mode, dtype, device, kernels, knobs."""
        cfg, m = self.config, self.model.cfg
        dev = self.device
        return {
            "engine": "bundled",
            "model": m.name,
            "model_config": m.to_dict(),
            "weights": self.weights_source,
            "tokenizer": getattr(self.tokenizer, "name", type(self.tokenizer).__name__),
            "mode": cfg.mode,
            "batch_invariant": cfg.batch_invariant,
            "dtype": m.dtype,
            "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev)
            if dev.type == "cuda"
            else platform.processor() or platform.machine(),
            "torch": torch.__version__,
            "num_threads": torch.get_num_threads(),
            "kernels": dict(self.kernels.routes),
            "kernel_implementations": dict(self.kernels.implementations),  # the matrix's names
            "unrouted": self.kernels.unrouted,
            "fully_invariant_routing": cfg.batch_invariant and not self.kernels.unrouted,
            "max_num_seqs": cfg.max_num_seqs,
            "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "chunk_size": cfg.chunk_size,
            "chunk_alignment": cfg.block_size if cfg.batch_invariant else None,
            "block_size": cfg.block_size,
            "num_blocks": self.num_blocks,
            "enable_prefix_cache": cfg.enable_prefix_cache,
            "gemm_strategy": cfg.gemm_strategy,
            "splitk_max_m": cfg.splitk_max_m,
            "splitk_parts": cfg.splitk_parts,
            "split_kv": cfg.split_kv,
            "split_kv_size": cfg.split_kv_size,
            "split_kv_min_tokens": cfg.split_kv_min_tokens,
            "prefix_attention": cfg.prefix_attention,
            "batch_mechanisms": self.kernels.batch_mechanisms,
            "split_kv_units": self.kernels.units,
            "cuda_graph_buckets": list(cfg.graph_ladder),
            "cuda_graphs": self._graphs_info(),
            "shared_rng": cfg.shared_rng,
            "tp_size": cfg.tensor_parallel,  # SGLang's name for it
            "collective": self.kernels.implementations.get("allreduce"),  # None at tensor_parallel 1
            "nccl_config": self.runner.nccl_config,  # None unless the ranks are NCCL ranks (CUDA)
            "sampler": "shared torch generator"
            if cfg.shared_rng
            else "counter-based splitmix64 keyed by (seed, position)",
            "greedy_tie_break": "lowest index",
            "speculative": cfg.speculative,
            "speculative_k": cfg.spec.k,
            "speculative_stats": self.spec_stats.as_dict(),
        }
