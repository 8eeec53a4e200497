"""e2e `seeded-sampling`: temperature > 0 with a seed gives the same tokens at every concurrency.

Positive controls: different seeds must give different tokens (a server that ignores the seed
would otherwise pass vacuously); and the inverse test: the same sweep on the bundled engine with
one engine-wide RNG (``--shared-rng``) must observe divergence, so the sweep can see sampling
that depends on the batch.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e import seeded_check, seeded_inverse_check

pytestmark = pytest.mark.e2e


def test_seeded_sampling(invariance, target):
    seeded_check(invariance, target)


@pytest.mark.inverse
def test_inverse_seeded_sampling_shared_rng(invariance, shared_rng_target):
    seeded_inverse_check(invariance, shared_rng_target)
