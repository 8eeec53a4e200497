"""Launch a compiled Triton kernel without the JIT's per-call work, once a call has compiled it.

Why: ``kernel[grid](*args)`` binds every argument, computes its specialization (dtype, 16-byte
alignment, divisibility of each integer), hashes a cache key and checks the kernel's globals on
every call. For decode-sized GEMMs and row ops that host work (tens of microseconds) is longer
than the kernel, so an eager caller measures the launcher rather than the hardware.

``Launcher.launch(key, grid, args, constexprs)`` goes through the JIT the first time a ``key`` is
seen, keeps the compiled kernel it returns, and from then on calls that kernel's launcher
directly: one dict lookup, the raw stream, and the C launch. The caller's ``key`` must fix
everything the JIT specializes on, or a later call could run code compiled for other values:
every integer argument and every tensor's dtype and 16-byte alignment (``aligned``). Floats
are not specialized. Nothing about the arithmetic changes: it is the same compiled kernel.
Launch hooks (profilers, ``knobs.runtime.launch_enter_hook``) always take the JIT path.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch
import triton

_MAX_PLANS = 4096  # per kernel; a caller with unbounded keys falls back to the JIT past it


def aligned(*tensors: torch.Tensor | None) -> tuple[bool, ...]:
    """16-byte alignment of each tensor's data pointer (what the JIT specializes pointers on)."""
    return tuple(t is not None and t.data_ptr() % 16 == 0 for t in tensors)


def _hooks() -> bool:
    """Whether a launch hook is registered. Newer triton keeps an always-present ``HookChain`` whose
    ``calls`` list is empty when nothing is registered; older triton keeps None or a function."""
    rt = triton.knobs.runtime
    return any(h is not None and bool(getattr(h, "calls", True)) for h in (rt.launch_enter_hook, rt.launch_exit_hook))


class Launcher:
    """One Triton kernel and its launch plans by key (see the module docstring)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.plans: dict[Hashable, Callable[[Sequence[Any]], None]] = {}
        self.arg_names: list[str] = list(getattr(kernel, "arg_names", []))

    def launch(
        self, key: Hashable | None, grid: tuple[int, ...], args: Sequence[Any], constexprs: dict[str, Any],
        options: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Run the kernel on ``grid``; ``args`` are the leading non-constexpr arguments in order,
        ``constexprs`` every constexpr by name, ``options`` num_warps / num_stages."""
        plan = self.plans.get(key) if key is not None else None
        if plan is not None and not _hooks():
            plan(args)
            return
        compiled = self.kernel[grid](*args, **constexprs, **(options or {}))
        if key is not None and len(self.plans) < _MAX_PLANS:
            made = self._plan(compiled, grid, len(args), constexprs)
            if made is not None:
                self.plans[key] = made

    def tail(self, n_args: int, constexprs: dict[str, Any]) -> tuple[Any, ...] | None:
        """The values after the first ``n_args`` arguments that a direct launch passes (the JIT passes
        constexprs too; the compiled launcher skips them): the call's, else the parameter's default.
        None where one has neither: such a call cannot get a plan, and would run the slow JIT path
        every time (a test checks that every call site gets one)."""
        fn = getattr(self.kernel, "fn", None)
        params = inspect.signature(fn).parameters if fn is not None else {}
        out = []
        for name in self.arg_names[n_args:]:
            if name in constexprs:
                out.append(constexprs[name])
            elif name in params and params[name].default is not inspect.Parameter.empty:
                out.append(params[name].default)
            else:
                return None
        return tuple(out)

    def _plan(self, compiled: Any, grid: tuple[int, ...], n_args: int, constexprs: dict[str, Any]):
        """The direct launch of ``compiled``, or None where this triton has another launcher shape."""
        run = getattr(compiled, "run", None)
        function = getattr(compiled, "function", None)
        packed = getattr(compiled, "packed_metadata", None)
        tail = self.tail(n_args, constexprs)
        if run is None or function is None or packed is None or tail is None:
            return None
        g = (*grid, 1, 1)
        g0, g1, g2 = int(g[0]), int(g[1]), int(g[2])
        raw_stream = torch._C._cuda_getCurrentRawStream
        device = torch.cuda.current_device()

        def plan(args: Sequence[Any]) -> None:
            run(g0, g1, g2, raw_stream(device), function, packed, None, None, None, *args, *tail)

        return plan
