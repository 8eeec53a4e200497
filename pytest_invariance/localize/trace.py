"""The recorder: every aten op of a forward pass in execution order, and the module calls around them.

A ``TorchDispatchMode`` sees each aten op below autograd and the composite decompositions
(``F.linear`` arrives as ``aten.t`` + ``aten.addmm``), so the op that rounds differently is named
as the dispatcher runs it. Forward pre/post hooks on every submodule give each op its module path
and make each module call a node of a call tree (``align`` pairs trees of two runs). What is kept
per op is the observer's business (``probe``): the tracer keeps names, paths and shapes only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

OP, MODULE = "op", "module"
TENSOR = "<tensor>"  # stands for a tensor argument in a kept call (census replays ops with its own)
ROOT_PATH = "<model>"


@dataclass
class Event:
    """One aten op or one module call. ``index`` counts starts, ``done`` completions."""

    index: int
    kind: str
    name: str  # aten.mm.default, or the module's class name
    path: str  # innermost module path for an op; the module's own path for a module call
    in_shapes: list[tuple[int, ...]] = field(default_factory=list)
    in_dtypes: list[str] = field(default_factory=list)
    out_shapes: list[tuple[int, ...]] = field(default_factory=list)
    out_dtypes: list[str] = field(default_factory=list)
    done: int = -1
    data: Any = None  # what the observer keeps (digests, the probe's slices)
    call: Any = None  # (func, (args, kwargs) with tensors as TENSOR) when the tracer keeps calls

    @property
    def signature(self) -> tuple[str, str, str]:
        return (self.kind, self.name, self.path)


@dataclass
class Node:
    """A module call: its event and, in order, the events and calls inside it."""

    event: Event
    children: list[Event | Node] = field(default_factory=list)

    def flat(self) -> list[Event]:
        """Every event inside this call, in start order, then the call's own event."""
        out: list[Event] = []
        for c in self.children:
            out.extend(c.flat() if isinstance(c, Node) else [c])
        out.append(self.event)
        return out


class Observer(Protocol):
    def before(self, ev: Event, inputs: list[torch.Tensor]) -> Any: ...

    def after(self, ev: Event, state: Any, outputs: list[torch.Tensor]) -> None: ...


def tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors among a call's arguments or results (nested lists, dicts, model outputs)."""
    if hasattr(tree, "to_tuple") and callable(tree.to_tuple):  # transformers ModelOutput
        tree = tree.to_tuple()
    leaves, _ = tree_flatten(tree)
    out: list[torch.Tensor] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            out.append(leaf)
        elif hasattr(leaf, "to_tuple") and callable(leaf.to_tuple):
            out.extend(tensors(leaf.to_tuple()))
    return out


def _shapes(ts: list[torch.Tensor]) -> tuple[list[tuple[int, ...]], list[str]]:
    return [tuple(t.shape) for t in ts], [str(t.dtype).removeprefix("torch.") for t in ts]


class Tracer(TorchDispatchMode):
    """Calls ``observer`` around every aten op and module call while active (see :func:`trace`)."""

    def __init__(self, observer: Observer, keep_calls: bool = False) -> None:
        super().__init__()
        self.observer = observer
        self.keep_calls = keep_calls
        self.events: list[Event] = []
        self.root = Node(Event(-1, MODULE, "forward", "<forward>"))
        self._stack: list[Node] = [self.root]
        self._done = 0
        self.paused = False

    def _start(self, kind: str, name: str, path: str, inputs: list[torch.Tensor]) -> Event:
        ev = Event(len(self.events), kind, name, path)
        ev.in_shapes, ev.in_dtypes = _shapes(inputs)
        self.events.append(ev)
        return ev

    def _finish(self, ev: Event, state: Any, outputs: list[torch.Tensor]) -> None:
        ev.out_shapes, ev.out_dtypes = _shapes(outputs)
        ev.done = self._done
        self._done += 1
        self.observer.after(ev, state, outputs)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        # An ``out=`` tensor is written, not read: its old (often uninitialized) bits are no input.
        inputs = tensors((args, {k: v for k, v in kwargs.items() if k != "out"}))
        ev = self._start(OP, str(func), self._stack[-1].event.path, inputs)
        if self.keep_calls:
            ev.call = (func, tree_map(lambda a: TENSOR if isinstance(a, torch.Tensor) else a, (args, kwargs)))
        self._stack[-1].children.append(ev)
        state = self.observer.before(ev, inputs)
        out = func(*args, **kwargs)
        self._finish(ev, state, tensors(out))
        return out

    # -- module hooks -----------------------------------------------------------------------
    def pre_hook(self, path: str) -> Any:
        def hook(module: torch.nn.Module, args: Any, kwargs: Any) -> None:
            if self.paused:
                return
            self.paused = True
            try:
                inputs = tensors((args, kwargs))
                ev = self._start(MODULE, type(module).__name__, path or ROOT_PATH, inputs)
                node = Node(ev)
                self._stack[-1].children.append(node)
                self._stack.append(node)
                node.event.data = ("pending", self.observer.before(ev, inputs))
            finally:
                self.paused = False

        return hook

    def post_hook(self) -> Any:
        def hook(module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            if self.paused or len(self._stack) < 2:
                return
            self.paused = True
            try:
                node = self._stack.pop()
                _, state = node.event.data
                node.event.data = None
                self._finish(node.event, state, tensors(output))
            finally:
                self.paused = False

        return hook


@contextlib.contextmanager
def trace(observer: Observer, model: Any = None, keep_calls: bool = False) -> Iterator[Tracer]:
    """Trace everything run inside the block; ``model`` (an ``nn.Module``) gets hooks on every submodule."""
    tracer = Tracer(observer, keep_calls)
    handles = []
    if isinstance(model, torch.nn.Module):
        for path, mod in model.named_modules():
            handles.append(mod.register_forward_pre_hook(tracer.pre_hook(path), with_kwargs=True))
            handles.append(mod.register_forward_hook(tracer.post_hook(), with_kwargs=True))
    try:
        with tracer:
            yield tracer
    finally:
        for h in handles:
            h.remove()
