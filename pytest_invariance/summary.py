"""Terminal summary: per (family, implementation), verdict counts and the worst evidence."""

from __future__ import annotations

from collections import Counter, defaultdict

from pytest_invariance.oracles.classes import format_ranges
from pytest_invariance.oracles.stats import weakest_pass
from pytest_invariance.oracles.verdict import SEVERITY, VERDICTS, vacuous_by_construction
from pytest_invariance.records import describe_localization

WEAK_TRIALS = 3  # fewer clean trials than this, or
WEAK_UPPER = 0.5  # a 95% upper bound on the failure rate above this, and a pass is flagged weak


def _ulp(ev: dict) -> float:
    v = ev.get("max_ulp", 0)
    return float("inf") if v == "inf" else float(v or 0)


def _worst_evidence(recs: list[dict]) -> str:
    bad = [r for r in recs if r["verdict"] != "invariant" and not vacuous_by_construction(r)]
    if not bad:
        return ""
    worst = min(bad, key=lambda r: (SEVERITY.get(r["verdict"], -1), -_ulp(r.get("evidence") or {})))
    ev = worst.get("evidence") or {}
    first = ev.get("first") or {}
    parts = [f"worst: {worst['oracle']} {worst['verdict']}"]
    if worst.get("quantization"):
        parts.append(str(worst["quantization"]))
    if first.get("batch_size") is not None:
        parts.append(f"first N={first['batch_size']}")
    if ev.get("max_ulp"):
        ulp = ev["max_ulp"]
        parts.append(f"max ULP {ulp:g}" if isinstance(ulp, (int, float)) else f"max ULP {ulp}")
    if ev.get("trials"):
        parts.append(f"{ev.get('failures', 0)}/{ev['trials']} trials")
    if ev.get("equivalence_classes"):
        parts.append(f"classes {format_ranges(ev['equivalence_classes'])}")
    for r in bad:  # a replayed bundled-engine step that named its first differing op
        if loc := describe_localization((r.get("extra") or {}).get("localization"), short=True):
            parts.append(f"{loc} ({(r.get('shape') or {}).get('sweep', r['oracle'])} replayed)")
            break
    return ", ".join(parts)


def pass_power(recs: list[dict]) -> str:
    """The weakest ``invariant`` of a group: its clean trials and the Wilson upper bound of its
    failure rate; flagged WEAK with fewer than 3 trials or a bound above 0.5 (empty: no pass)."""
    weakest = weakest_pass(recs)
    if weakest is None:
        return ""
    trials, failures, hi = weakest
    text = f"weakest pass: {trials - failures}/{trials} trials clean, failure rate < {hi:.2f} at 95%"
    if trials < WEAK_TRIALS or hi > WEAK_UPPER:
        why = f"fewer than {WEAK_TRIALS} trials" if trials < WEAK_TRIALS else f"bound above {WEAK_UPPER}"
        text += f" (WEAK: {why})"
    return text


def summary_lines(records: list[dict]) -> list[str]:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        impl = r["implementation"] + (f" ({r['mode']})" if r.get("mode") else "")
        target = (r.get("extra") or {}).get("target")  # an e2e server by engine and host
        if isinstance(target, str) and "@" in target:
            impl = target + (f" ({r['mode']})" if r.get("mode") else "")
        groups[(r["family"], impl)].append(r)
    lines = []
    width = max((len(f"{f} / {i}") for f, i in groups), default=10)
    for (family, impl), recs in sorted(groups.items()):
        counts = Counter(r["verdict"] for r in recs)
        text = " ".join(f"{v} {counts[v]}" for v in VERDICTS if counts[v])
        trivial = sum(1 for r in recs if vacuous_by_construction(r))
        if trivial:
            text += f" ({trivial} vacuous by construction)"
        notes = [n for n in (_worst_evidence(recs), pass_power(recs)) if n]
        lines.append(f"{family + ' / ' + impl:<{width}}  {text}" + "".join(f"  | {n}" for n in notes))
    return lines
