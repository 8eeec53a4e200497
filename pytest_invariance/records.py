"""The record: one JSON object per (test, implementation, oracle, configuration).

Schema-versioned so committed records stay readable as the tool evolves. A
record is plain JSON data so it crosses pytest-xdist on the test report.
"""

from __future__ import annotations

import datetime as _dt
import math
import uuid
from typing import Any

SCHEMA = "pytest-invariance.record/1"
SCHEMA_MAJOR = "pytest-invariance.record/1"

REQUIRED = (
    "schema", "run_id", "time", "hardware", "software", "family", "implementation", "mode",
    "quantization", "dtype", "shape", "oracle", "contract", "verdict", "evidence", "control",
    "cost", "nodeid",
)


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
    **extra_fields: Any,
) -> dict:
    """Assemble a complete record; unknown keyword fields go under ``extra`` unless top-level known."""
    from pytest_invariance.oracles.verdict import check_verdict

    top = {k: extra_fields.pop(k) for k in ("seed", "trials", "profile") if k in extra_fields}
    extra = dict(extra_fields.pop("extra", None) or {})
    extra.update(extra_fields)
    rec = {
        "schema": SCHEMA,
        "run_id": run_id,
        "time": now_iso(),
        "hardware": fingerprint["hardware"],
        "software": fingerprint["software"],
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
    return jsonable(rec)


def record_key(rec: dict) -> tuple:
    """Identity of a record's configuration: the same key in a later run supersedes it."""
    import json

    return (
        rec.get("nodeid"),
        rec.get("family"),
        rec.get("implementation"),
        rec.get("mode"),
        rec.get("quantization"),
        rec.get("oracle"),
        json.dumps(rec.get("shape"), sort_keys=True),
        (rec.get("hardware") or {}).get("name"),
    )
