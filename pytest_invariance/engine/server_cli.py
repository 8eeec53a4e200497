"""``pytest-invariance serve``: flags to an ``EngineConfig``, then uvicorn on the app.

Bad flags are one line on stderr and status 2; a port that cannot be bound is one line and status 1.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import socket
import sys
from typing import Any

from .argtypes import positive_int as _positive
from .argtypes import positive_int_list as _positive_list
from .argtypes import positive_seconds as _seconds
from .server_limits import DEFAULT_MAX_N, DEFAULT_MAX_QUEUE, ServerLimits, make_server, uvicorn_config


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise _ArgError(message)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be an integer, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in [0, 65535], got {value}")
    return value


DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
          "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """Flags of ``pytest-invariance serve``."""
    from ..reference_kernels.collectives.nccl_configs import CONFIGS, DEFAULT
    from .config import GEMM_STRATEGIES, PRESETS

    p = _Parser(prog="pytest-invariance serve", description="Serve the bundled engine over HTTP.")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=_port, default=8000)
    p.add_argument("--batch-invariant", action="store_true", help="route every kernel to reference_kernels")
    p.add_argument("--preset", choices=sorted(PRESETS), default="demo",
                   help="synthetic model shape (default demo; llama3-8b for a GPU)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="model dtype (default: the model's)")
    p.add_argument("--max-num-seqs", type=_positive("--max-num-seqs"), default=64)
    p.add_argument("--chunk-size", type=_positive("--chunk-size"), default=None)
    p.add_argument("--prefix-cache", action="store_true", help="enable the prefix cache (a positive control)")
    p.add_argument(
        "--shared-rng", action="store_true", help="one engine-wide RNG stream (a positive control)"
    )
    p.add_argument("--gemm-strategy", choices=GEMM_STRATEGIES, default="m-bucket",
                   help="default-mode GEMMs: m-bucket (split-K with fp32 partials at M <= --splitk-max-m, "
                   "one pass above; a positive control) or one-pass (the stock GEMM only)")  # fmt: skip
    p.add_argument("--splitk-max-m", type=_positive("--splitk-max-m"), default=8,
                   help="largest step (token rows) that takes split-K under m-bucket (default 8)")  # fmt: skip
    p.add_argument("--split-kv", choices=("auto", "none", "fixed"), default="auto",
                   help="default-mode decode attention: auto (split count from batch and cores; a positive "
                   "control), none (one pass) or fixed (splits of a fixed length)")  # fmt: skip
    p.add_argument("--prefix-attention", choices=("cascade", "one-pass"), default="cascade",
                   help="default-mode attention of a prefill chunk with a cached or earlier-chunk prefix: "
                   "cascade (two LSE-merged partial softmaxes; a positive control) or one-pass (SDPA)")  # fmt: skip
    p.add_argument("--speculative", default="off", metavar="ngram:K",
                   help="speculative decoding: ngram:K drafts K tokens by prompt lookup and verifies them "
                   "in one forward (default off)")  # fmt: skip
    p.add_argument(
        "--model", default=None, metavar="PATH", help="local Hugging Face dir (config.json + safetensors)"
    )
    p.add_argument(
        "--api-key", default=None, help="require 'Authorization: Bearer KEY' on every route but /health"
    )
    p.add_argument(
        "--max-queue", type=int, default=DEFAULT_MAX_QUEUE, help="admitted requests beyond max-num-seqs"
    )
    p.add_argument("--cuda-graphs", choices=("auto", "on", "off"), default="auto",
                   help="decode steps replayed from CUDA graphs padded to a capture ladder: auto (on CUDA at "
                   "--tensor-parallel 1), on, or off (eager, as vLLM's --enforce-eager)")  # fmt: skip
    p.add_argument("--cuda-graph-buckets", type=_positive_list("--cuda-graph-buckets"), default=(),
                   metavar="1,2,4,...", help="decode batch sizes padded to (the capture ladder; default "
                   "1,2,4,8,16,24,... up to --max-num-seqs while graphs are on; with graphs off, padding "
                   "only: a positive control)")  # fmt: skip
    p.add_argument("--tensor-parallel", type=_positive("--tensor-parallel"), default=1, metavar="N",
                   help="run the forward on N ranks (column/row/vocab-parallel): gloo on 127.0.0.1 with "
                   "--device cpu, NCCL with one GPU each (cuda:0..N-1) with --device cuda")  # fmt: skip
    p.add_argument("--nccl-config", choices=list(CONFIGS), default=DEFAULT,
                   help="the named NCCL environment the tensor-parallel CUDA ranks start under "
                   f"(default {DEFAULT}; reference_kernels/collectives/nccl_configs.py)")  # fmt: skip
    p.add_argument("--max-n", type=_positive("--max-n"), default=DEFAULT_MAX_N)
    p.add_argument("--header-timeout", type=_seconds("--header-timeout"), default=10.0, metavar="S",
                   help="close a connection that has not sent a complete request head within S (default 10)")
    p.add_argument("--body-timeout", type=_seconds("--body-timeout"), default=30.0, metavar="S",
                   help="answer 408 to a request whose body is not complete S after its head (default 30)")
    p.add_argument("--keep-alive-timeout", type=_seconds("--keep-alive-timeout"), default=5.0, metavar="S",
                   help="close an idle keep-alive connection after S (default 5)")
    p.add_argument("--max-connections", type=_positive("--max-connections"), default=None, metavar="N",
                   help="open connections at most; at the cap the longest-idle one, else the newcomer, is "
                   "answered 503 with Retry-After and closed (default: from the file-descriptor limit, "
                   "at most 4096)")  # fmt: skip
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return p


def _model_from_dir(path: str) -> Any:
    """``ModelConfig.from_hf_dir`` with an unusable config.json named with its file and key."""
    from .config import ModelConfig

    where = os.path.join(path, "config.json")
    try:
        return ModelConfig.from_hf_dir(path)
    except KeyError as e:
        raise ValueError(f"{where}: missing key {e.args[0]!r}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except (TypeError, ValueError, AttributeError, RecursionError) as e:
        raise ValueError(f"{where}: unusable value ({type(e).__name__}: {e})") from None


def engine_config_from_args(args: argparse.Namespace) -> Any:
    """An ``EngineConfig`` from parsed flags; ValueError/OSError for anything unusable."""
    from .config import PRESETS, EngineConfig

    if args.device != "cpu" and not (args.device == "cuda" or args.device.startswith("cuda:")):
        raise ValueError(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"--device {args.device}: CUDA is not available")
    model = PRESETS[args.preset]()
    if args.model is not None:
        if not os.path.isfile(os.path.join(args.model, "config.json")):
            raise ValueError(f"--model {args.model!r}: no config.json in that directory")
        model = _model_from_dir(args.model)
    if args.dtype:
        model.dtype = DTYPES[args.dtype]
    if args.max_queue < 0:
        raise ValueError(f"--max-queue must be >= 0, got {args.max_queue}")
    kwargs: dict[str, Any] = {
        "model": model,
        "model_path": args.model,
        "device": args.device,
        "batch_invariant": args.batch_invariant,
        "max_num_seqs": args.max_num_seqs,
        "enable_prefix_cache": args.prefix_cache,
        "shared_rng": args.shared_rng,
        "gemm_strategy": args.gemm_strategy,
        "splitk_max_m": args.splitk_max_m,
        "split_kv": args.split_kv,
        "prefix_attention": args.prefix_attention,
        "tensor_parallel": args.tensor_parallel,
        "nccl_config": args.nccl_config,
        "speculative": args.speculative,
        "cuda_graphs": args.cuda_graphs,
        "cuda_graph_buckets": args.cuda_graph_buckets,
    }
    defaults = EngineConfig()
    kwargs["max_num_batched_tokens"] = max(defaults.max_num_batched_tokens, args.max_num_seqs)
    if args.chunk_size is not None:
        kwargs["chunk_size"] = args.chunk_size
    return EngineConfig(**kwargs)


def serve_main(argv: list[str] | None = None) -> int:
    """``pytest-invariance serve [flags]``: returns the exit status; bad flags are one line on stderr."""
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    except _ArgError as e:
        print(f"pytest-invariance serve: error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = engine_config_from_args(args)
        from .server_app import create_app  # FastAPI loads here, not for --help

        app = create_app(config, api_key=args.api_key, max_queue=args.max_queue, max_n=args.max_n)
    except (ValueError, OSError, KeyError, json.JSONDecodeError) as e:
        print(f"pytest-invariance serve: error: {e}", file=sys.stderr)
        return 2

    try:
        sock = listen_socket(args.host, args.port)
    except OSError as e:
        why = "the port is already in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        print(f"pytest-invariance serve: error: cannot listen on {args.host}:{args.port}: {why}", file=sys.stderr)
        return 1
    limits = ServerLimits(args.header_timeout, args.body_timeout, args.keep_alive_timeout, args.max_connections)
    server = make_server(uvicorn_config(app, args.host, args.port, args.log_level, limits))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    except (OSError, SystemExit) as e:
        print(f"pytest-invariance serve: error: cannot serve on {args.host}:{args.port} ({e})", file=sys.stderr)
        return 1
    finally:
        sock.close()
    return 0 if server.started else 1


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's bound socket, bound here so that a port in use is one clear line, not uvicorn's
    log and exit status."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def serve(argv: list[str] | None = None) -> int:
    """Alias of :func:`serve_main`."""
    return serve_main(argv)
