"""Terminal summary: per (family, implementation), verdict counts and the worst evidence."""

from __future__ import annotations

from collections import Counter, defaultdict

from pytest_invariance.oracles.classes import format_ranges
from pytest_invariance.oracles.stats import weakest_pass
from pytest_invariance.oracles.verdict import SEVERITY, VERDICTS, vacuous_by_construction
from pytest_invariance.records import describe_localization

BOUND_TRIALS = 3  # a pass on fewer clean trials than this shows its trial bound even where power was measured


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


def _power_of(recs: list[dict]) -> dict[str, dict]:
    """Per oracle, the weakest ``extra.power`` its passes were reached with (lowest kill rate)."""
    out: dict[str, dict] = {}
    for r in recs:
        p = (r.get("extra") or {}).get("power")
        if r["verdict"] != "invariant" or not isinstance(p, dict) or not p.get("classes"):
            continue
        if r["oracle"] not in out or p["caught"] / p["classes"] < out[r["oracle"]]["caught"] / out[r["oracle"]]["classes"]:
            out[r["oracle"]] = p
    return out


def pass_power(recs: list[dict]) -> str:
    """What the group's passes are worth: per oracle, the kill rate over the zoo classes that apply
    to it (``extra.power``, stamped by the session), and the trial bound only where it bites: where
    a probabilistic class was missed (more trials would see it), where no zoo class speaks for the
    oracle, or on fewer than 3 clean trials (empty: no pass)."""
    weakest = weakest_pass(recs)
    if weakest is None:
        return ""
    power = _power_of(recs)
    passed = sorted({r["oracle"] for r in recs if r["verdict"] == "invariant"})
    parts = []
    for oracle in passed:
        p = power.get(oracle)
        if p is not None:
            missed = f" (blind to {', '.join(p['missed'])})" if p.get("missed") else ""
            parts.append(f"{oracle} {p['caught']}/{p['classes']}{missed}")
    text = f"power over the zoo: {'; '.join(parts)}" if parts else ""
    trials, failures, hi = weakest
    bites = (any(p.get("bound_bites") for p in power.values()) or trials - failures < BOUND_TRIALS
             or any(o not in power for o in passed))  # fmt: skip
    if bites:
        from pytest_invariance.power.session import part_of

        bound = f"weakest pass {trials - failures}/{trials} trials clean, failure rate < {hi:.2f} at 95%"
        zooless = sorted({r["oracle"] for r in recs if r["verdict"] == "invariant" and part_of(r) is None})
        unmeasured = [o for o in passed if o not in power and o not in zooless]
        notes = ([f"power not measured ({', '.join(unmeasured)})"] if unmeasured else []) + \
            ([f"no zoo class for {', '.join(zooless)}"] if zooless else [])  # fmt: skip
        bound = "; ".join([*notes, bound])
        text = f"{text}; {bound}" if text else bound
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
