"""What a spawned rank sees, sent back as a tensor: proof that a pool's environment reached it.

Module-level so that spawned ranks can unpickle it (tests/ is on the parent's sys.path, which a
spawned child inherits). Never registered.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch


def environment_of(_: torch.Tensor, group: object = None, names: Sequence[str] = ()) -> torch.Tensor:
    """``NAME=value`` lines of this rank's ``os.environ`` for ``names`` (``<unset>`` where absent), as bytes."""
    text = "\n".join(f"{n}={os.environ.get(n, '<unset>')}" for n in names)
    return torch.frombuffer(bytearray(text.encode()), dtype=torch.uint8).clone()


def decode(t: torch.Tensor) -> dict[str, str]:
    """The lines of :func:`environment_of` back as a dict."""
    return dict(line.split("=", 1) for line in bytes(t.tolist()).decode().splitlines())
