"""e2e `cache`: the same request cold (after a flush) and warm; the warm one must hit the cache.

Targets: the bundled engines with ``--prefix-cache`` (or the given URLs). Positive control: the\nsame sweep on the inverse target (invariance off);
if it sees no divergence the verdict is `vacuous`, never a pass.
"""

from __future__ import annotations

import pytest

from pytest_invariance.e2e import invariant_check

pytestmark = pytest.mark.e2e


def test_cache(invariance, cache_target, cache_control_target):
    invariant_check(invariance, "cache", cache_target, cache_control_target)
