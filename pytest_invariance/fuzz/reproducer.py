"""The standalone reproducer: a Python script that needs only ``requests``.

Its text is :mod:`pytest_invariance.fuzz.wire` verbatim (how the fuzzer sends a workload and
compares the probe), then the shrunk workload and the probe-alone answer the fuzzer saw, as JSON
data. So it sends exactly what the fuzzer sent, compares exactly as the fuzzer compared, and an
engine's authors can run it without installing pytest-invariance.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from . import wire

_TAIL = '''

# ---- the workload pytest-invariance's fuzzer found (data) ----------------------------------------
FOUND_ON = {found_on}
WORKLOAD = json.loads({workload})
PROBE_ALONE = json.loads({alone})

if __name__ == "__main__":
    sys.exit(reproducer_main(FOUND_ON["url"], WORKLOAD, PROBE_ALONE, sys.argv[1:]))
'''


def script(url: str, workload: dict, alone: dict, about: dict) -> str:
    """The reproducer's source: usage line, the wire module, the data."""
    head = (f"#!/usr/bin/env python3\n# Reproducer written by pytest-invariance fuzz: "
            f"python {{this file}} [URL] [--runs N]; exit 1 reproduced, 0 not, 2 server error.\n"
            f"# Found on {about.get('label', url)}: {about.get('summary', '')}\n")  # fmt: skip
    found_on = json.dumps({"url": url, **about}, sort_keys=True)
    tail = _TAIL.format(found_on=repr(json.loads(found_on)), workload=repr(json.dumps(workload, indent=1)),
                        alone=repr(json.dumps(alone)))  # fmt: skip
    return head + Path(wire.__file__).read_text() + tail


def write(directory: Path, url: str, workload: dict, alone: dict, about: dict) -> Path:
    """Write ``fuzz-repro-<digest>.py`` (and the workload as ``.json`` beside it) under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(json.dumps([url, workload], sort_keys=True).encode()).hexdigest()[:10]
    path = directory / f"fuzz-repro-{digest}.py"
    path.write_text(script(url, workload, alone, about))
    path.with_suffix(".json").write_text(json.dumps({"url": url, "workload": workload, "probe_alone": alone,
                                                     **about}, indent=1, sort_keys=True) + "\n")  # fmt: skip
    return path
