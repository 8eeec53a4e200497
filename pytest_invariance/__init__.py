"""pytest-invariance: differential determinism tests for LLM inference.

The public API, importable from here::

    from pytest_invariance import InvarianceFailure, rows_pool, splitk_matmul

Importing this package is cheap: no torch, no pandas. Each name loads its module on first use
(``__getattr__`` below), so the pytest plugin, which imports this package, stays light.
"""

__version__ = "0.1.0"

# public name -> module that defines it (relative to this package)
_PUBLIC = {
    # the fixture's types and its failure
    "Invariance": "fixture",
    "InvarianceFailure": "judge",
    "Settings": "settings",
    # order-sensitive inputs
    "rows_pool": "oracles.inputs",
    "wide_spread": "oracles.inputs",
    "with_ties": "oracles.inputs",
    # positive controls, ready to pass as control=
    "splitk_matmul": "controls",
    "m_bucket_matmul": "controls",
    "split_rmsnorm": "controls",
    "split_log_softmax": "controls",
    "split_mean": "controls",
    # the oracles themselves (no pytest needed)
    "OracleResult": "oracles.batch",
    "batch_size_oracle": "oracles.batch",
    "batch_position_oracle": "oracles.batch",
    "run_to_run_oracle": "oracles.batch",
    "chunking_oracle": "oracles.batch",
    "analyze": "oracles.sequences",
    # records and the matrix
    "read_records": "recordio",
    "render_matrix": "matrix",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_invariance' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


def _extend_path_in_a_checkout() -> None:
    """Let ``pytest_invariance.oracles`` (and ``.reference_kernels``, ``.suites``) import from a
    source checkout that is not installed, as they do from a wheel or an editable install.

    pyproject.toml maps those folders, which sit beside this one, into this package; without an
    install nothing applies the mapping, and a script run from the repository root found this
    folder but not the subpackages. Where the folders are not inside this package (a checkout),
    the checkout's root joins ``__path__``; in a wheel they are inside, and nothing changes."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    root = here.parent
    mapped = ("oracles", "reference_kernels", "suites")
    if all(not (here / m).exists() and (root / m / "__init__.py").is_file() for m in mapped):
        if str(root) not in __path__:
            __path__.append(str(root))


_extend_path_in_a_checkout()
