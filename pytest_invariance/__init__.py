"""pytest-invariance: differential determinism tests for LLM inference.

Importing this package is cheap: no torch, no pandas. Heavy pieces load on use.
"""

__version__ = "0.1.0"


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
