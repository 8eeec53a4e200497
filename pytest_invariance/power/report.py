"""What a power measurement says: per class caught or not (and why), per oracle a kill rate, and
the one summary line. Pure Python over the cached entries (no torch), so the plugin's summary and
the matrix can read a cached measurement without running anything.

An entry is one (class, oracle): ``caught``, the clean twin's verdict (``false_alarm`` when it was
flagged), the detection ``rate`` of a probabilistic class, the ``reason`` of a miss; or ``blind``
where the class is out of that oracle's reach by design (a deterministic batch bug is never seen
by run-to-run), which counts neither for nor against the oracle.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ClassOutcome:
    name: str
    layer: str  # op | e2e
    caught: bool
    false_alarm: bool
    reason: str  # why it was missed ("" when caught, or no better word than "missed")
    rate: float | None  # the best detection rate over the oracles that apply, where measured


@dataclass(frozen=True)
class OraclePower:
    oracle: str
    caught: int
    classes: int
    missed: tuple[str, ...]  # "name (reason)" of each class this oracle applies to and missed
    probabilistic_miss: bool  # a miss that more trials would shrink: the trial bound bites here

    @property
    def text(self) -> str:
        text = f"{self.oracle} {self.caught}/{self.classes}"
        return text + (f" (blind to {', '.join(self.missed)})" if self.missed else "")

    def as_record(self, digest: str) -> dict:
        return {"config": digest, "oracle": self.oracle, "caught": self.caught, "classes": self.classes,
                "missed": list(self.missed), "bound_bites": self.probabilistic_miss,
                "text": f"{self.caught}/{self.classes} zoo classes"}  # fmt: skip


def _label(name: str, reason: str) -> str:
    return f"{name} ({reason})" if reason else name


def applicable(entries: Iterable[dict], oracles: Iterable[str] | None = None) -> list[dict]:
    """The measured entries (not blind by design) of the given oracles (all where None); e2e
    entries are kept whatever the per-op oracles are (their oracles are the suites')."""
    keep = None if oracles is None else set(oracles)
    return [e for e in entries if "blind" not in e and (keep is None or e["layer"] == "e2e" or e["oracle"] in keep)]


def class_outcomes(entries: Iterable[dict], oracles: Iterable[str] | None = None) -> list[ClassOutcome]:
    """One outcome per planted class, over the oracles given: caught when any of them caught it."""
    by_name: dict[str, list[dict]] = {}
    for e in applicable(entries, oracles):
        by_name.setdefault(e["name"], []).append(e)
    out = []
    for name, es in by_name.items():
        caught = any(e["caught"] for e in es)
        rates = [e["rate"] for e in es if e.get("rate") is not None]
        best = max(rates) if rates else None
        reasons = [e.get("reason", "") for e in es if not e["caught"]]
        if best is not None and not caught:  # the best oracle's rate names the miss
            reasons = [e.get("reason", "") for e in es if e.get("rate") == best] + reasons
        reason = "" if caught else next((r for r in reasons if r), "")
        out.append(ClassOutcome(name, es[0]["layer"], caught, any(e.get("false_alarm") for e in es), reason, best))
    return out


def oracle_power(entries: Iterable[dict], oracle: str) -> OraclePower | None:
    """The kill rate of the zoo classes that apply to ``oracle`` (None: no class applies)."""
    es = [e for e in entries if e["oracle"] == oracle and "blind" not in e]
    if not es:
        return None
    missed = tuple(_label(e["name"], e.get("reason", "")) for e in es if not e["caught"])
    prob = any(e.get("rate") is not None and not e["caught"] for e in es)
    return OraclePower(oracle, sum(e["caught"] for e in es), len(es), missed, prob)


def summary_line(entries: list[dict], oracles: Iterable[str] | None = None) -> str:
    """``this configuration catches 9 of 10 planted classes; blind to: only-at-6 (size not swept:
    needs N=6); 0 false alarms on 10 clean twins``."""
    outcomes = class_outcomes(entries, oracles)
    caught = [o for o in outcomes if o.caught]
    missed = [o for o in outcomes if not o.caught]
    alarms = [o.name for o in outcomes if o.false_alarm]
    text = f"this configuration catches {len(caught)} of {len(outcomes)} planted classes"
    if missed:
        text += "; blind to: " + ", ".join(_label(o.name, o.reason) for o in missed)
    text += f"; {len(alarms)} false alarm{'s' if len(alarms) != 1 else ''} on {len(outcomes)} clean twins"
    return text + (f" ({', '.join(alarms)})" if alarms else "")


def table_lines(entries: list[dict]) -> list[str]:
    """Per (class, oracle): caught / missed / blind by design, with the rate and the twin's verdict."""
    width = max([17, *(len(e["name"]) for e in entries)])  # fixed minimums: progress prints one at a time
    owidth = max([14, *(len(e["oracle"]) for e in entries)])
    lines = []
    for e in entries:
        head = f"{e['layer']:<3} {e['name']:<{width}}  {e['oracle']:<{owidth}}  "
        if "blind" in e:
            lines.append(head + f"blind by design: {e['blind']}")
            continue
        state = "caught" if e["caught"] else "MISSED"
        if e.get("rate") is not None:
            state += f" (detection {e['rate']:.2f} over {e['runs']} runs)"
        if not e["caught"] and e.get("reason"):
            state += f": {e['reason']}"
        twin = "FALSE ALARM" if e.get("false_alarm") else e.get("twin", "?")
        lines.append(head + f"{state}; clean twin {twin}")
    return lines
