"""e2e `seeded-sampling`: temperature > 0 with a seed gives the same tokens at every concurrency.

Positive control: different seeds must give different tokens (a server that ignores the seed
would otherwise pass vacuously).
"""

from __future__ import annotations

import pytest

from ._sweeps import seeded_sampling

pytestmark = pytest.mark.e2e


def test_seeded_sampling(invariance, target):
    seeded_sampling(invariance, target)
