"""What each per-op check demands of an implementation."""

from __future__ import annotations


def expect_for(role: str, expect: str, oracle: str, oracle_expect: tuple[tuple[str, str], ...] = ()) -> str:
    """The registry's expectation, except run-to-run for a batch mutant.

    A batch mutant (split count from the batch size) is deterministic call to call by
    design, so under run-to-run it must come out ``invariant`` against the per-call
    control; demanding ``divergent`` there would be wrong, and only measuring it would
    be a check that cannot fail.
    """
    stated = dict(oracle_expect)  # the kernel's own per-oracle exceptions, declared at registration
    if oracle in stated:
        return stated[oracle]
    if role == "mutant" and oracle == "run-to-run":
        return "invariant"
    return expect
