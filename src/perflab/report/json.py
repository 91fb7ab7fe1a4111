"""The doctor's JSON output (schema perflab.doctor/2, see DESIGN.md)."""
from __future__ import annotations

import math

import orjson

from perflab.doctor.finding import Report


def clean_json(value):
    """NaN/inf → None, recursively, so every JSON parser accepts the output."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


def report_json(report: Report, *, indent: bool = True) -> str:
    """One JSON object; NaN/inf become null so every JSON parser accepts it."""
    option = orjson.OPT_INDENT_2 if indent else 0
    return orjson.dumps(clean_json(report.to_dict()), option=option | orjson.OPT_SERIALIZE_NUMPY).decode()
