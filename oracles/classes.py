"""Equivalence classes of batch sizes (or concurrency levels) by identical output.

``{1} {2..32} {33..2048}`` shows at a glance where a kernel switches strategy
or a CUDA-graph bucket ends.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping


def equivalence_classes(outputs: Mapping[int, Hashable]) -> list[list[int]]:
    """Group keys (batch sizes) by equal value; classes ordered by their smallest key."""
    groups: dict[Hashable, list[int]] = {}
    for key in sorted(outputs):
        groups.setdefault(outputs[key], []).append(key)
    return sorted(groups.values(), key=lambda g: g[0])


def contract_classes(outputs: Mapping[int, object], same: Callable[[object, object], bool]) -> list[list[int]]:
    """Group keys whose outputs ``same`` calls equal under a declared contract (``ulp<=k``,
    ``tolerance``): each key joins the first class whose first member it matches, in key order.
    Tolerance is not transitive, so a class is "within the contract of its smallest key"."""
    classes: list[list[int]] = []
    for key in sorted(outputs):
        home = next((c for c in classes if same(outputs[c[0]], outputs[key])), None)
        if home is None:
            classes.append([key])
        else:
            home.append(key)
    return classes


def _ranges(keys: list[int], universe: list[int]) -> str:
    """Compress keys into runs over the sorted universe of tested keys: 2..32 means every tested size in between."""
    index = {k: i for i, k in enumerate(universe)}
    parts: list[str] = []
    run: list[int] = []
    for k in keys:
        if run and index[k] == index[run[-1]] + 1:
            run.append(k)
        else:
            if run:
                parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}..{run[-1]}")
            run = [k]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}..{run[-1]}")
    return ",".join(parts)


def format_classes(classes: list[list[int]]) -> str:
    universe = sorted(k for c in classes for k in c)
    return " ".join("{" + _ranges(sorted(c), universe) + "}" for c in classes)
