"""The folder a launched command finds first on its ``PYTHONPATH``: a ``sitecustomize`` and us.

Why ``sitecustomize`` on ``PYTHONPATH``: every Python process started under the launcher (the
engine, its ``multiprocessing`` workers under ``fork`` or ``spawn``, a ``subprocess`` of them)
inherits the environment and imports ``sitecustomize`` at start-up, whatever venv it runs in.
Ours waits for ``torch`` to be imported (processes that never import it pay nothing), then calls
``hook.activate``; it first runs the ``sitecustomize`` it shadows, so a distribution's or a venv's
own keeps working. Beside it lies a link to this installation's ``pytest_invariance``, so an
engine in another venv imports the reference kernels without installing anything.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SITECUSTOMIZE = '''"""Written by pytest-invariance launch: run the reference kernels in this process once torch loads."""
import importlib.abc
import importlib.util
import os
import sys


def _run_shadowed():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        path = os.path.join(os.path.abspath(entry or "."), "sitecustomize.py")
        if os.path.dirname(path) != here and os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("_invariance_shadowed_sitecustomize", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


def _activate():
    try:
        from pytest_invariance.launch.hook import activate
        activate("sitecustomize")
    except Exception as exc:
        raise RuntimeError(f"pytest-invariance launch: cannot run the reference kernels in pid {os.getpid()}: "
                           f"{type(exc).__name__}: {exc}") from exc


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Wraps the loader of whichever torch spec gets executed (``importlib.util.find_spec("torch")``,
    as ``transformers`` calls it to ask whether torch exists, finds a spec without loading it)."""

    searching = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self.searching:
            return None
        self.searching = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.searching = False
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                if self in sys.meta_path:
                    sys.meta_path.remove(self)
                _activate()

            spec.loader.exec_module = exec_module
        return spec


try:
    _run_shadowed()
finally:
    if "torch" in sys.modules:
        _activate()
    else:
        sys.meta_path.insert(0, _AfterTorch())
'''


def make_boot_dir(package_dir: Path) -> Path:
    """A fresh folder holding ``sitecustomize.py`` and a ``pytest_invariance`` link to ``package_dir``."""
    boot = Path(tempfile.mkdtemp(prefix="invariance-launch-"))
    (boot / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (boot / "pytest_invariance").symlink_to(package_dir, target_is_directory=True)
    return boot


def child_env(base: dict[str, str], boot: Path | None, census: Path | None) -> dict[str, str]:
    """``base`` plus what the hook reads; ``boot`` None: only the environment (the vLLM plugin path)."""
    from .hook import ENV_CENSUS, ENV_LAUNCH

    env = dict(base)
    env[ENV_LAUNCH] = "1"
    if boot is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(boot), base.get("PYTHONPATH", "")) if p)
    if census is not None:
        env[ENV_CENSUS] = str(census)
    else:
        env.pop(ENV_CENSUS, None)
    return env
