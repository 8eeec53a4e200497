import importlib
import sys
from pathlib import Path

pytest_plugins = ["pytester"]

# pytester's in-process runs unload every module a run imported; numpy and torch
# cannot be loaded twice in one process (the second import segfaults or refuses),
# so a pytester test that runs first in a process would crash. Load them up front.
# (The torch-free checks of the plugin run in subprocesses.)
for _name in ("numpy", "torch"):
    try:
        importlib.import_module(_name)
    except ImportError:
        pass

# Shared helpers (fake_server, synthetic_records) sit here, above the per-package test folders.
sys.path.insert(0, str(Path(__file__).resolve().parent))


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _power_off_in_nested_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytester sessions would each measure the per-op zoo for their configuration (seconds to
    minutes); the power tests turn it back on with a cache they seed (tests/power)."""
    monkeypatch.setenv("PYTEST_INVARIANCE_POWER", "off")
