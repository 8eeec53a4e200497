"""Live progress lines that reach the terminal while pytest captures output, with or without xdist.

Why not print: pytest captures a test's stdout and stderr (and, with xdist, a worker's), so a
sweep that runs for minutes showed nothing until its test ended. The plugin installs a sink that
suspends capture for one line and writes it through the terminal reporter (or to the process's
real stderr on an xdist worker, which the controller's terminal shows). Without the plugin the
lines go to stderr.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

_sink: Callable[[str], None] | None = None
_lock = threading.Lock()


def install(sink: Callable[[str], None] | None) -> None:
    """Route progress lines to ``sink`` (None: back to stderr)."""
    global _sink
    _sink = sink


def emit(line: str) -> None:
    """One progress line, now; never raises (progress must not fail a check)."""
    with _lock:
        try:
            if _sink is not None:
                _sink(line)
            else:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        except Exception:  # noqa: BLE001 - a closed terminal must not turn into a failed sweep
            pass


def pytest_sink(config) -> Callable[[str], None]:  # noqa: ANN001 - a pytest.Config; no pytest import here
    """The sink the plugin installs: capture suspended around each line."""
    capman = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    worker = hasattr(config, "workerinput")

    def write(line: str) -> None:
        if capman is None:
            sys.stderr.write(line + "\n")
            return
        with capman.global_and_fixture_disabled():
            if reporter is not None and not worker:
                reporter.write_line(line)
            else:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()

    return write
