"""No import circles in the package, lazy (function-level) imports included.

The graph is read from the source with ``ast``, so it sees the imports a function makes when it
runs, which is where registration circles used to hide (a family importing its mutants'
registration, which imported the family back). An edge is an explicit import of another module of
the package; a package's ``__init__`` counts only where it is imported by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The package-dir mapping of pyproject.toml: folder -> package name.
PACKAGE_DIRS = {
    "pytest_invariance": "pytest_invariance",
    "oracles": "pytest_invariance.oracles",
    "reference_kernels": "pytest_invariance.reference_kernels",
    "suites": "pytest_invariance.suites",
}


def modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for folder, pkg in PACKAGE_DIRS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


def _resolve(current: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs or [base]
            for t in targets:
                if t in mods and t != name:
                    graph[name].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_graph_sees_lazy_imports():
    g = import_graph()
    # the catalogue imports the mutants inside its functions
    assert "pytest_invariance.reference_kernels.mutants.splitk_matmul" in g["pytest_invariance.reference_kernels.catalogue"]


def test_cycle_finder_finds_a_planted_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_the_package():
    found = cycles(import_graph())
    assert found == [], "import circles: " + "; ".join(" <-> ".join(c) for c in found)


# What each part may import besides itself (docs/ARCHITECTURE.md); "" is the top package
# ``pytest_invariance`` (its ``__init__`` only: the version).
ALLOWED = {
    "oracles": set(),
    "reference_kernels": set(),
    "engine": {"reference_kernels", ""},
    "adapters": {"oracles", ""},
    # talks to engines over HTTP only; localize (lazily): the replay of a bundled-engine step
    "e2e": {"adapters", "oracles", "plugin", "localize", ""},
    # records / hardware / recordio / matrix are "plugin" here; the fixture imports localize lazily
    "localize": {"oracles", "reference_kernels", "plugin", "engine", ""},  # engine: bundled.py and replay.py only
    # planted-bug engines: self-contained, so a control can never borrow the code it checks
    "fakes": set(),
}


def _part(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("oracles", "reference_kernels", "engine", "adapters", "e2e", "suites", "localize",
                                        "fakes"):
        return parts[1]
    return "" if module == "pytest_invariance" else "plugin"


def test_each_part_imports_only_what_the_architecture_allows():
    bad = sorted(
        f"{a} -> {b}"
        for a, targets in import_graph().items()
        if _part(a) in ALLOWED
        for b in targets
        if _part(b) != _part(a) and _part(b) not in ALLOWED[_part(a)]
    )
    assert bad == [], "layer violations: " + "; ".join(bad)


def test_localize_never_imports_pytest_or_the_judge():
    """``pytest_invariance.localize`` runs from the CLI and from user code: no pytest under it."""
    bad = []
    for name, path in modules().items():
        if not name.startswith("pytest_invariance.localize"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad += [f"{name} -> {n}" for n in names if n.split(".")[0] == "pytest" or n.endswith((".judge", ".fixture", ".plugin"))]
    assert bad == []


def _suite_test_module(module: str) -> bool:
    return module.startswith("pytest_invariance.suites.") and module.rsplit(".", 1)[-1].startswith("test_")


def test_suite_test_modules_share_code_only_through_helper_modules():
    """A suite's ``test_*`` module imports no other: shared cases and runs live in ``_``-modules
    (``suites/ops/_attention_cases.py``), so splitting a suite never makes one test file depend on
    another's collection."""
    bad = sorted(
        f"{a} -> {b}"
        for a, targets in import_graph().items()
        if _suite_test_module(a)
        for b in targets
        if _suite_test_module(b)
    )
    assert bad == [], "suite test modules importing each other: " + "; ".join(bad)


def test_the_suite_rule_sees_the_attention_helpers():
    g = import_graph()
    for name in ("test_attention_prefill", "test_attention_decode"):
        assert "pytest_invariance.suites.ops._attention_runs" in g[f"pytest_invariance.suites.ops.{name}"]
    assert _suite_test_module("pytest_invariance.suites.ops.test_attention_decode")
    assert not _suite_test_module("pytest_invariance.suites.ops._attention_cases")
