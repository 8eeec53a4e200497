"""Mutant ``allreduce``: a ring all-reduce over send/recv whose chunk boundaries follow the message.

As NCCL's ring does, the message is cut into ``channels x world`` chunks, the channel count chosen
from the message's bytes (more channels for larger messages), and chunk ``j`` of every channel is
reduced around the ring starting one rank after its slot. The order in which element ``i``'s
contributions are added therefore depends on which chunk ``i`` falls in, and that depends on the
message size: a row's reduced bits change with the rows it shares the message with. With 2 ranks
one addition is commutative, so the mutant needs 3 or more ranks to diverge.

``rotation`` shifts every chunk's ring slot; :func:`per_call_rotation` bumps it on each call, a
run-to-run control (the ring starting where the last call left off).

Each ring step's send and receive go out as one ``batch_isend_irecv``: on NCCL a lone send to the
next rank would lazily create a two-rank communicator that waits on a peer still busy with its own
send (a cycle round the ring); batched, both ride the group's communicator. Gloo runs the same
batch as two plain point-to-point ops. Buffers and slot indices live on the message's device.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from itertools import count

import torch
import torch.distributed as dist

CHANNEL_BYTES = ((4096, 1), (16384, 2))  # messages under 4 KiB: 1 channel, under 16 KiB: 2, else 4
MAX_CHANNELS = 4


def channels(nbytes: int) -> int:
    """Channels used for a message of ``nbytes`` (NCCL raises its channel count with size)."""
    return next((c for limit, c in CHANNEL_BYTES if nbytes < limit), MAX_CHANNELS)


def _slots(n: int, nbytes: int, w: int, device: torch.device | str = "cpu") -> list[torch.Tensor]:
    """Element indices of each ring slot: ``channels x w`` chunks of ``ceil(n / (channels w))``."""
    c = channels(nbytes)
    chunk = -(-n // (c * w))
    out = []
    for j in range(w):
        pieces = [torch.arange(lo, min(lo + chunk, n)) for ch in range(c) if (lo := (ch * w + j) * chunk) < n]
        out.append(torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.long))
    return [idx.to(device) for idx in out]


def _exchange(send: torch.Tensor, recv: torch.Tensor, to: int, frm: int, group: object) -> None:
    """Send ``send`` to ``to`` and receive ``recv`` from ``frm`` as one batch (an empty slot is
    skipped: both ends know it is empty from the message size alone)."""
    ops = []
    if send.numel():
        ops.append(dist.P2POp(dist.isend, send.contiguous(), to, group=group))
    if recv.numel():
        ops.append(dist.P2POp(dist.irecv, recv, frm, group=group))
    for req in dist.batch_isend_irecv(ops) if ops else ():
        req.wait()


def ring_all_reduce(parts: torch.Tensor, group: object = None, rotation: int = 0) -> torch.Tensor:
    """Ring reduce-scatter then ring all-gather, each step one send and one receive per rank."""
    x = parts[0].clone() if parts.shape[0] == 1 else parts.sum(0)
    w, r = dist.get_world_size(group), dist.get_rank(group)
    if w == 1:
        return x
    flat = x.reshape(-1).clone()
    slots = _slots(flat.numel(), flat.numel() * flat.element_size(), w, flat.device)
    nxt, prv = dist.get_global_rank(group, (r + 1) % w), dist.get_global_rank(group, (r - 1) % w)
    for s in range(w - 1):  # reduce-scatter: after w-1 steps rank r owns slot r+1+rotation
        out_idx, in_idx = slots[(r - s + rotation) % w], slots[(r - s - 1 + rotation) % w]
        buf = torch.empty(in_idx.numel(), dtype=flat.dtype, device=flat.device)
        _exchange(flat[out_idx], buf, nxt, prv, group)
        flat[in_idx] = buf + flat[in_idx]
    for s in range(w - 1):  # all-gather: pass the reduced slots around
        out_idx, in_idx = slots[(r + 1 - s + rotation) % w], slots[(r - s + rotation) % w]
        buf = torch.empty(in_idx.numel(), dtype=flat.dtype, device=flat.device)
        _exchange(flat[out_idx], buf, nxt, prv, group)
        flat[in_idx] = buf
    return flat.reshape(x.shape)


def per_call_rotation(start: int = 0) -> Callable[..., torch.Tensor]:
    """The ring with its rotation bumped on every call, as a fresh picklable partial each time."""
    counter = count(start)

    def next_ring() -> Callable[..., torch.Tensor]:
        return partial(ring_all_reduce, rotation=next(counter))

    return next_ring
