"""Localization: which aten op of a model's forward pass first made the probe row depend on its batch.

The probe runs alone and inside batches of N (at several positions) under a ``TorchDispatchMode``
that sees every aten op, with module paths from forward hooks. The first op whose probe-row output
differs while all of its inputs were still equal is the culprit. A census runs the per-op oracles
on every distinct op the forward calls, at the model's own shapes. No pytest here: the fixture
(``invariance.localize``) and the CLI (``pytest-invariance localize``) glue it in.

- ``trace``: the recorder (dispatch mode + hooks) and the call tree it builds;
- ``rows``: where the probe's row lies in a batched tensor, and when it cannot be told;
- ``digest``: exact bit digests, so memory stays bounded to the probe's slices;
- ``align``: pairs the batched run's events with the probe-alone run's;
- ``probe``: one configuration (batch size, position) compared against the probe alone;
- ``culprit``: the first differing op, the drift table, the summary over configurations;
- ``run``: :func:`localize`, the whole procedure;
- ``census`` / ``census_ops``: the op census and its per-op callables;
- ``models``: Hugging Face directories, the bundled engine's model, any ``nn.Module``;
- ``plant``: planted mutants (positive controls: one module swapped for a batch-variant kernel);
- ``replay``: one bundled-engine step rebuilt from ``/server_info`` and localized (``extra.localization``);
- ``greedy``: unique greedy completions of a probe alone and in batches (the end-to-end check);
- ``report``: tables and records.
"""

from __future__ import annotations

from typing import Any

__all__ = ["census", "localize"]


def localize(*args: Any, **kwargs: Any) -> Any:
    """See :func:`pytest_invariance.localize.run.localize`."""
    from .run import localize as _localize

    return _localize(*args, **kwargs)


def census(*args: Any, **kwargs: Any) -> Any:
    """See :func:`pytest_invariance.localize.census.census`."""
    from .census import census as _census

    return _census(*args, **kwargs)
