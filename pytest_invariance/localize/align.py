"""Pair the batched run's events with the probe-alone run's.

When both runs call the same ops in the same order (one forward over the batch, as Hugging Face
models do) the pairing is by index. Where a module loops over the batch (the bundled engine's
per-sequence attention) the op sequences differ: such a module call is compared as one unit, at
its output, and only its child calls whose count is the same in both runs are paired further.
Its own ops are paired only when the two sequences differ by data-movement ops alone (a Hugging
Face model expands its position ids for a batch: one ``aten.expand`` more); otherwise nothing in
it is paired by position, since the k-th op of a loop over the batch belongs to the k-th
neighbour, not to the probe.
"""

from __future__ import annotations

import difflib
from collections import defaultdict

from .rows import is_data_movement
from .trace import OP, Event, Node


def _sig(node: Node) -> list[tuple[str, str, str]]:
    return [e.signature for e in node.flat()]


def _calls(node: Node) -> dict[str, list[Node]]:
    out: dict[str, list[Node]] = defaultdict(list)
    for c in node.children:
        if isinstance(c, Node):
            out[c.event.path].append(c)
    return out


def pair(alone: Node, batched: Node) -> tuple[dict[int, Event], list[str]]:
    """Batched event index -> its probe-alone twin, and the module calls compared only whole."""
    plan: dict[int, Event] = {}
    coarse: list[tuple[str, str]] = []

    def walk(a: Node, b: Node) -> None:
        fa, fb = a.flat(), b.flat()
        if [e.signature for e in fa] == [e.signature for e in fb]:
            plan.update({eb.index: ea for ea, eb in zip(fa, fb, strict=True) if eb.index >= 0})
            return
        if b.event.index >= 0:
            plan[b.event.index] = a.event
        if not _pair_own_ops(a, b, plan):
            coarse.append((b.event.path, f"{b.event.path}: {len(fa) - 1} events alone, {len(fb) - 1} in the batch"))
        ca, cb = _calls(a), _calls(b)
        for path, nodes in ca.items():
            if len(cb.get(path, [])) == len(nodes):
                for x, y in zip(nodes, cb[path], strict=True):
                    walk(x, y)

    walk(alone, batched)
    # Only the innermost such calls: their callers differ because of them.
    inner = [text for i, (path, text) in enumerate(coarse) if not any(_inside(q, path) for q, _ in coarse[i + 1 :])]
    return plan, inner


def _inside(path: str, outer: str) -> bool:
    """Whether module ``path`` is called inside ``outer`` (the root paths contain every module)."""
    return outer.startswith("<") or path.startswith(outer + ".")


def _own(node: Node) -> list[Event]:
    return [c for c in node.children if isinstance(c, Event)]


def _pair_own_ops(a: Node, b: Node, plan: dict[int, Event]) -> bool:
    """Pair a call's own ops when the two runs differ only by inserted or dropped data movement."""
    oa, ob = _own(a), _own(b)
    matcher = difflib.SequenceMatcher(None, [e.signature for e in oa], [e.signature for e in ob], autojunk=False)
    pairs: list[tuple[Event, Event]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs.extend(zip(oa[i1:i2], ob[j1:j2], strict=True))
        elif not all(e.kind == OP and is_data_movement(e.name) for e in (*oa[i1:i2], *ob[j1:j2])):
            return False
    plan.update({eb.index: ea for ea, eb in pairs})
    return True
