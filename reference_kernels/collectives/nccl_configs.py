"""Named NCCL configurations: the environment a real engine pins before NCCL starts.

A configuration is a property of the ranks, not of a call: NCCL reads its ``NCCL_*`` variables
once, when the first communicator is created, so :class:`~.group.RankPool` sets them in each
spawned rank before ``init_process_group`` and a pool serves exactly one configuration.

What the engines pin (read from their sources, not copied):

- vLLM (vllm-project/vllm, ``vllm/model_executor/layers/batch_invariant.py``,
  ``override_envs_for_invariance``, run when ``VLLM_BATCH_INVARIANT`` is set): tree all-reduce
  (``NCCL_ALGO=allreduce:tree``), the Simple protocol, exactly one channel (MIN = MAX = 1),
  ``NCCL_NTHREADS=1``, and also ``NCCL_LAUNCH_MODE=GROUP``, CollNet, NVLS and P2P-over-network
  off, ``NCCL_SOCKET_NTHREADS=1``; it also turns its own symmetric-memory all-reduce off.
- SGLang (sgl-project/sglang, the ``--enable-deterministic-inference`` handler, formerly
  ``_handle_deterministic_inference`` in ``python/sglang/srt/server_args.py``): at TP > 1 it sets
  ``NCCL_ALGO=allreduce:tree``, disables its custom and symmetric-memory all-reduce, and in
  current versions pins ``NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS`` to
  ``SGLANG_DETERMINISTIC_NCCL_NCHANNELS`` (default 8, ``python/sglang/srt/environ.py``), since the
  channel count NCCL picks from the message size changes each element's tree. Older versions
  pinned only the algorithm.

Facts about NCCL itself (NVIDIA/nccl ``src/graph/tuning.cc``):

- ``NCCL_NTHREADS`` is the real name (``NCCL_PARAM(Nthreads, "NTHREADS", -2)``: threads per
  block). A value that is not a multiple of the warp size is replaced by the maximum (512 for
  Simple), with a warning; so vLLM's ``NCCL_NTHREADS=1`` pins nothing but the default maximum.
- ``allreduce:tree`` is the per-function prefix syntax of ``NCCL_ALGO`` / ``NCCL_PROTO``
  (``"<algos>;function:<algos>"``), parsed by NCCL 2.24 and later; older NCCL reads the whole
  string as one algorithm list. The suite records ``torch.cuda.nccl.version()`` beside each verdict.

``NCCL_NVLS_ENABLE=0`` is set in every configuration, ``nccl-default`` included: NVLink multicast
stays off on the lent machines (the device tool's KINDS.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALWAYS = {"NCCL_NVLS_ENABLE": "0"}  # NVLink multicast off, whatever the configuration


@dataclass(frozen=True)
class NcclConfig:
    """One named environment for the ranks' NCCL, and why it exists."""

    name: str
    why: str
    env: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        """The variables a rank sets before NCCL starts (``ALWAYS`` last: it cannot be undone)."""
        return {**self.env, **ALWAYS}


CONFIGS: dict[str, NcclConfig] = {
    c.name: c
    for c in (
        NcclConfig("nccl-default", "NCCL's own choice of algorithm, protocol and channels by message size"),
        NcclConfig(
            "nccl-vllm-invariant",
            "vLLM's VLLM_BATCH_INVARIANT pinning: tree, Simple, one channel",
            {
                "NCCL_ALGO": "allreduce:tree",
                "NCCL_PROTO": "Simple",
                "NCCL_MIN_NCHANNELS": "1",
                "NCCL_MAX_NCHANNELS": "1",
                "NCCL_NTHREADS": "1",
                "NCCL_LAUNCH_MODE": "GROUP",
                "NCCL_COLLNET_ENABLE": "0",
                "NCCL_P2P_NET_DISABLE": "1",
                "NCCL_SOCKET_NTHREADS": "1",
            },
        ),
        NcclConfig(
            "nccl-sglang-deterministic",
            "SGLang's --enable-deterministic-inference at TP > 1: tree, 8 channels",
            {"NCCL_ALGO": "allreduce:tree", "NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "8"},
        ),
    )
}


# The catalogue's NCCL stock rows and the configuration their ranks run under; every other CUDA
# row (reference, mutant, symmetric memory) runs on ``nccl-default`` ranks.
STOCK_ROWS: dict[str, str] = {
    "torch-nccl": "nccl-default",
    "torch-nccl-vllm-pinned": "nccl-vllm-invariant",
    "torch-nccl-sglang-pinned": "nccl-sglang-deterministic",
}
DEFAULT = "nccl-default"


def pool_config(implementation: str) -> NcclConfig:
    """The configuration the ranks of ``implementation``'s CUDA rows are started with."""
    return CONFIGS[STOCK_ROWS.get(implementation, DEFAULT)]


def nccl_version() -> str | None:
    """The NCCL torch was built with (``"2.27.3"``), None where torch has no NCCL: recorded beside
    each verdict, since the ``allreduce:tree`` syntax needs 2.24 or later."""
    import torch

    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def config(name: str) -> NcclConfig:
    """The configuration called ``name``; ValueError naming the known ones otherwise."""
    if name not in CONFIGS:
        raise ValueError(f"unknown NCCL configuration {name!r}; expected one of {', '.join(CONFIGS)}")
    return CONFIGS[name]
