"""Equivalence classes of batch sizes (or concurrency levels) by identical output.

``{1} {2..32} {33..2048}`` shows at a glance where a kernel switches strategy
or a CUDA-graph bucket ends.
"""

from __future__ import annotations

import re
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


ClassRanges = list[list[list[int]]]
"""Equivalence classes as data: one list per class of ``[lo, hi]`` spans over the *tested* keys
(``[lo, hi]`` means every tested key from lo to hi), e.g. ``[[[1, 1]], [[2, 32]]]``. Plain JSON, so
records carry it as it is; :func:`format_ranges` writes the ``{1} {2..32}`` text only at the edge."""


def class_ranges(classes: list[list[int]]) -> ClassRanges:
    """Compress each class into runs over the sorted universe of tested keys."""
    universe = sorted(k for c in classes for k in c)
    index = {k: i for i, k in enumerate(universe)}
    out: ClassRanges = []
    for members in classes:
        spans: list[list[int]] = []
        for k in sorted(members):
            if spans and index[k] == index[spans[-1][1]] + 1:
                spans[-1][1] = k
            else:
                spans.append([k, k])
        out.append(spans)
    return out


def format_ranges(ranges: ClassRanges) -> str:
    """``[[[1, 1]], [[2, 4], [32, 32]]]`` -> ``{1} {2..4,32}``."""
    return " ".join(
        "{" + ",".join(str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in spans) + "}" for spans in ranges
    )


def format_classes(classes: list[list[int]]) -> str:
    return format_ranges(class_ranges(classes))


_CLASS_RE = re.compile(r"\{([^}]*)\}")


def parse_ranges(text: str) -> ClassRanges:
    """The text form back into data, for records written before classes travelled as data.

    ``"{1} {2..32} {33,40..64}"`` -> ``[[[1, 1]], [[2, 32]], [[33, 33], [40, 64]]]``; unparseable parts
    are dropped rather than guessed."""
    out: ClassRanges = []
    for body in _CLASS_RE.findall(text or ""):
        spans: list[list[int]] = []
        for part in body.split(","):
            lo, sep, hi = part.strip().partition("..")
            try:
                spans.append([int(lo), int(hi)] if sep else [int(lo), int(lo)])
            except ValueError:
                continue
        if spans:
            out.append(spans)
    return out


def check_ranges(value: object) -> ClassRanges:
    """``value`` as class ranges (text of an older record is parsed); ValueError when it is neither."""
    if isinstance(value, str):
        return parse_ranges(value)
    if not isinstance(value, list):
        raise ValueError(f"equivalence classes must be a list of spans, got {type(value).__name__}")
    for spans in value:
        if not isinstance(spans, list) or not all(
            isinstance(s, list) and len(s) == 2 and all(type(v) is int for v in s) and s[0] <= s[1] for s in spans
        ):
            raise ValueError(f"equivalence class {spans!r} is not a list of [lo, hi] integer spans")
    return value
