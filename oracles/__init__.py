"""Pure comparison logic for differential determinism tests.

Nothing here imports pytest. Modules that need tensors (``bits``, ``compare``,
``batch``, ``inputs``) import torch; ``verdict``, ``sweeps``, ``stats`` and
``sequences`` are pure Python so the plugin and the matrix can use them where
torch is absent.
"""

from .verdict import (  # noqa: F401
    DIVERGENT,
    INCOMPLETE,
    INVARIANT,
    UNSUPPORTED,
    VACUOUS,
    VERDICTS,
    decide,
)
