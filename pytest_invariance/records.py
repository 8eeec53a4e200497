"""The record: one JSON object per (test, implementation, oracle, configuration).

Schema-versioned so committed records stay readable as the tool evolves. A
record is plain JSON data so it crosses pytest-xdist on the test report; its
shape is typed (:class:`Record`, :class:`Evidence`, :class:`Control`) and checked
once, by :func:`parse_record`, when a record is made or read. Everything
downstream (summary, matrix, plots) can then index it without guarding types.
"""

from __future__ import annotations

import datetime as _dt
import math
import uuid
from typing import Any, TypedDict

from .identity import fill_unknown, hardware_class, stack_of
from .oracles.classes import ClassRanges, check_ranges
from .oracles.verdict import VERDICTS

SCHEMA = "pytest-invariance.record/1"
SCHEMA_NAME, _, _VERSION = SCHEMA.rpartition("/")
SCHEMA_MAJOR = int(_VERSION.split(".")[0])

REQUIRED = (
    "schema", "run_id", "time", "hardware", "software", "family", "implementation", "mode",
    "quantization", "dtype", "shape", "oracle", "contract", "verdict", "evidence", "control",
    "cost", "nodeid",
)


class Control(TypedDict, total=False):
    """The positive control a verdict rests on: its name, whether it diverged, where it ran."""

    name: str
    diverged: bool | None
    foreign: bool  # the control ran on another engine than the subject
    evidence: dict[str, Any]


class Evidence(TypedDict, total=False):
    """What an oracle saw. Common fields are typed; an oracle may add its own (``points``, ...)."""

    trials: int
    failures: int
    rate: float
    first: dict[str, Any] | None  # where it first differed: batch_size, position, token_index, label
    max_ulp: float | str  # "inf" where a NaN or inf was involved
    max_abs: float
    unique: int | list[int] | dict[str, int]
    concurrency: int | list[int]
    points: list[dict[str, Any]]
    equivalence_classes: ClassRanges
    differing_batch_sizes: list[int]
    batch_sizes: list[int]
    error: str
    reason: str


class Culprit(TypedDict, total=False):
    """The first op whose output differed for the probe row while its inputs were equal."""

    module: str  # e.g. model.layers.0.self_attn.qkv_proj
    op: str  # the aten op (aten.mm.default), or the module's class where compared at module level
    family: str | None  # the kernel family the engine runs there
    kernel: str | None  # the implementation it runs (mutant:m-bucket-splitk ...)
    in_shapes: list[list[int]]
    out_shapes: list[list[int]]
    dtype: str
    max_ulp: float | None
    batch_sizes: list[int]


class Localization(TypedDict, total=False):
    """``extra.localization`` of a divergent bundled-engine e2e record: the replay of the step at
    which the probe first differed. ``culprit`` when an op was named, else ``reason`` says why not."""

    culprit: Culprit
    reason: str
    step: str  # decode | prefill
    token_index: int
    batch_size: int
    position: int
    what: str  # token | logprob: what first differed in the sweep


class Record(TypedDict):
    """One verdict with its evidence, control, cost and where it was measured (``REQUIRED`` keys)."""

    schema: str
    run_id: str
    time: str
    hardware: dict[str, Any]
    software: dict[str, Any]
    family: str
    implementation: str
    mode: str | None
    quantization: str | None
    dtype: str | None
    shape: Any
    oracle: str
    contract: str
    verdict: str
    evidence: Evidence
    control: Control | None
    cost: dict[str, Any] | None
    nodeid: str
    extra: dict[str, Any]


class RecordError(ValueError):
    """Why a JSON object is not a record this version can read (one line)."""


def _object_or_none(obj: dict, key: str) -> None:
    if obj.get(key) is not None and not isinstance(obj[key], dict):
        raise RecordError(f"field {key!r} is not an object or null")


def parse_record(obj: Any) -> Record:
    """Check ``obj`` against the record schema once and return it typed (raises :class:`RecordError`).

    Normalizes what older records wrote differently: a missing ``extra`` becomes ``{}``,
    equivalence classes written as text (``{1} {2..32}``) become ranges, and identity fields
    added since (ISA, AMX, GPU index and UUID, cuBLAS / cuDNN / NCCL, the engine) are None,
    unknown. Fields this version does not know pass through untouched."""
    if not isinstance(obj, dict):
        raise RecordError(f"not a JSON object ({type(obj).__name__})")
    schema = obj.get("schema")
    if not isinstance(schema, str):
        raise RecordError("no schema field")
    name, _, version = schema.rpartition("/")
    major = version.split(".")[0]
    if name != SCHEMA_NAME or not major.isdigit():
        raise RecordError(f"unknown schema {schema!r} (expected {SCHEMA_NAME}/{SCHEMA_MAJOR})")
    if int(major) != SCHEMA_MAJOR:
        raise RecordError(f"unsupported schema version {schema!r} (this version reads {SCHEMA_NAME}/{SCHEMA_MAJOR})")
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        raise RecordError(f"missing field(s) {', '.join(missing)}")
    hw = obj["hardware"]
    if not isinstance(hw, dict) or not isinstance(hw.get("name"), str) or not hw["name"]:
        raise RecordError("hardware has no name")
    for key in ("family", "implementation", "oracle", "verdict"):
        if not isinstance(obj[key], str) or not obj[key]:
            raise RecordError(f"field {key!r} is not a non-empty string")
    if obj["verdict"] not in VERDICTS:
        raise RecordError(f"unknown verdict {obj['verdict']!r}")
    for key in ("evidence", "software"):
        if not isinstance(obj[key], dict):
            raise RecordError(f"field {key!r} is not an object")
    fill_unknown(hw, obj["software"])
    for key in ("control", "cost", "extra"):
        _object_or_none(obj, key)
    ev = obj["evidence"]
    _object_or_none(ev, "first")
    if ev.get("equivalence_classes") is not None:
        try:
            ev["equivalence_classes"] = check_ranges(ev["equivalence_classes"])
        except ValueError as e:
            raise RecordError(f"evidence.equivalence_classes: {e}") from None
    if obj.get("extra") is None:
        obj["extra"] = {}
    _check_localization(obj["extra"].get("localization"))
    return obj  # type: ignore[return-value]


def _check_localization(loc: Any) -> None:
    if loc is None:
        return
    if not isinstance(loc, dict):
        raise RecordError("extra.localization is not an object")
    culprit, reason = loc.get("culprit"), loc.get("reason")
    if culprit is None and not (isinstance(reason, str) and reason):
        raise RecordError("extra.localization has neither a culprit nor a reason")
    if culprit is not None and not (isinstance(culprit, dict) and isinstance(culprit.get("module"), str)
                                    and isinstance(culprit.get("op"), str)):  # fmt: skip
        raise RecordError("extra.localization.culprit names no module and op")


def describe_localization(loc: Localization | None, short: bool = False) -> str:
    """One line: ``first op that diverged at token 13 (decode step, batch 16): aten.mm.default at
    model.layers.0.self_attn.qkv_proj [mutant:m-bucket-splitk], max ULP 1`` (empty: none);
    ``short``: ``first op aten.mm.default at model.layers.0.self_attn.qkv_proj [mutant:...]``, or
    empty where no op was named."""
    c = (loc or {}).get("culprit")
    if short or not loc:
        return f"first op {c['op']} at {c['module']}" + (f" [{c['kernel']}]" if c.get("kernel") else "") if c else ""
    where = f"token {loc.get('token_index')} ({loc.get('step')} step, batch {loc.get('batch_size')})"
    if c is None:
        return f"replayed {where}: no culprit: {loc.get('reason')}" if "step" in loc else f"not localized: {loc.get('reason')}"
    ulp = f", max ULP {c['max_ulp']:g}" if isinstance(c.get("max_ulp"), (int, float)) else ""
    return f"first op that diverged at {where}: {describe_localization(loc, True).removeprefix('first op ')}{ulp}"


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def jsonable(value: Any) -> Any:
    """Convert tensors' dtypes, tuples, sets and non-finite floats into plain JSON values."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        seq = sorted(value) if isinstance(value, (set, frozenset)) else value
        return [jsonable(v) for v in seq]
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)  # str subclasses (torch.__version__) must not cross xdist as themselves
    if isinstance(value, int):
        return int(value)
    mod = type(value).__module__
    if mod == "torch" and type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    if hasattr(value, "item") and callable(value.item):
        try:
            return jsonable(value.item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def make_record(
    *,
    run_id: str,
    fingerprint: dict,
    family: str,
    implementation: str,
    oracle: str,
    verdict: str,
    nodeid: str,
    quantization: str | None = None,
    dtype: Any = None,
    shape: Any = None,
    mode: str | None = None,
    contract: str = "bitwise",
    evidence: dict | None = None,
    control: dict | None = None,
    cost: dict | None = None,
    engine: dict | None = None,
    **extra_fields: Any,
) -> Record:
    """Assemble a complete record; unknown keyword fields go under ``extra`` unless top-level known.

    ``engine`` (e2e records: ``{"name", "version", "model"}``) joins the software stack."""
    from pytest_invariance.oracles.verdict import check_verdict

    software = dict(fingerprint["software"])
    if engine is not None:
        software["engine"] = engine
    top = {k: extra_fields.pop(k) for k in ("seed", "trials", "profile") if k in extra_fields}
    extra = dict(extra_fields.pop("extra", None) or {})
    extra.update(extra_fields)
    rec = {
        "schema": SCHEMA,
        "run_id": run_id,
        "time": now_iso(),
        "hardware": fingerprint["hardware"],
        "software": software,
        "family": family,
        "implementation": implementation,
        "mode": mode,
        "quantization": quantization,
        "dtype": dtype,
        "shape": shape,
        "oracle": oracle,
        "contract": contract,
        "verdict": check_verdict(verdict),
        "evidence": evidence or {},
        "control": control,
        "cost": cost,
        "nodeid": nodeid,
        **top,
        "extra": extra,
    }
    return parse_record(jsonable(rec))


def record_key(rec: Record) -> tuple:
    """Identity of a record's configuration: the same key in a later run supersedes it.

    The hardware is its class (``identity.hardware_class``) and the software stack is part of the
    key, so a run on an upgraded stack stands beside the old stack's verdicts instead of hiding them."""
    import json

    hw, sw = rec.get("hardware") or {}, rec.get("software") or {}
    return (
        rec.get("nodeid"),
        rec.get("family"),
        rec.get("implementation"),
        rec.get("mode"),
        rec.get("quantization"),
        rec.get("oracle"),
        json.dumps(rec.get("shape"), sort_keys=True),
        hardware_class(hw),
        stack_of(hw, sw),
    )
