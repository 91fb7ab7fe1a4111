"""Memory analyses for puzzle questions: answers computed from the recorded memory snapshots
(`<variant>.memory.json.gz`), from measurements.json and from extra JSON artifacts of a recording.

Registered into questions.ANALYSES on import (the package finds it by discovery).
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis
from perflab.puzzles.engine.spec import display_path


def _dig(value: Any, path: str, what: str) -> Any:
    for part in path.split("."):
        try:
            value = value[int(part)] if isinstance(value, list) else value[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise PerflabError(f"{what} has no field {path!r}") from None
    return value


def snapshot_path(ev: Any, variant: str):
    from perflab.puzzles.evidence.memory import snapshot_file

    path = snapshot_file(ev.folder, variant)
    if not path.is_file():
        raise PerflabError(f"no recorded {variant} memory snapshot at {display_path(path)}: {ev._record_hint()}")
    return path


def memory_report(ev: Any, variant: str) -> Any:
    """The memory doctor's report on a variant's snapshot, computed once per Evidence."""
    cache = ev.__dict__.setdefault("_memory_reports", {})
    if variant not in cache:
        from perflab.doctor.memory import diagnose_memory

        cache[variant] = diagnose_memory(snapshot_path(ev, variant))
    return cache[variant]


def memory_summary(ev: Any, variant: str) -> dict[str, Any]:
    return memory_report(ev, variant).analyses["memory"]["device"]


def _source(variant: str) -> str:
    return f"the recorded {variant} memory snapshot"


@analysis
def memory_doctor_top_id(ev: Any, variant: str = "slow") -> Computed:
    """The memory doctor's most important finding on the variant's snapshot."""
    top = memory_report(ev, variant).findings[0]
    evidence: dict[str, Any] = {"top finding": top.id, "severity": top.severity,
                                "estimated gain % (of reserved)": round(float(top.gain_pct), 1)}
    evidence.update({k: v for k, v in top.evidence.items() if isinstance(v, (int, float, str))})
    return Computed(top.id, evidence, f"perflab doctor on {_source(variant)}")


@analysis
def memory_field(ev: Any, path: str, variant: str = "slow") -> Computed:
    """A field of the memory summary by dotted path: `private_pools.count`, `totals.reserved_mb`."""
    s = memory_summary(ev, variant)
    value = _dig(s, path, "the memory summary")
    context = {"reserved MB": s["totals"]["reserved_mb"], "allocated MB": s["totals"]["allocated_mb"],
               "private pools": s["private_pools"]["count"]}
    return Computed(value, {path: value, **context}, _source(variant))


@analysis
def measurement_field(ev: Any, path: str) -> Computed:
    """A field of measurements.json by dotted path: `profiled.slow.memory.peak_reserved_mb`."""
    value = _dig(ev.measurements(), path, "measurements.json")
    return Computed(value, {path: value}, "the recorded measurements (measurements.json)")


@analysis
def artifact_field(ev: Any, file: str, path: str) -> Computed:
    """A field of another JSON file of the recording (e.g. configs.json) by dotted path."""
    from perflab.puzzles.engine.replay import read_json

    if "/" in file or "\\" in file or not file.endswith(".json"):
        raise PerflabError(f"artifact {file!r} must be a .json file name inside the recording")
    data = read_json(ev.folder / file)
    if not data:
        raise PerflabError(f"no {file} in {display_path(ev.folder)}: {ev._record_hint()}")
    value = _dig(data, path, file)
    return Computed(value, {path: value}, f"the recorded {file}")


@analysis
def doctor_evidence(ev: Any, finding: str, key: str, variant: str = "slow") -> Computed:
    """One evidence number of one finding of the (Kineto) doctor on the variant's trace."""
    report = ev.report(variant)
    for f in report.findings:
        if f.id == finding and key in f.evidence:
            return Computed(f.evidence[key], {"finding": f.id, "severity": f.severity,
                                              **{k: v for k, v in f.evidence.items()
                                                 if isinstance(v, (int, float, str))}},
                            f"perflab doctor on the recorded {variant} trace")
    raise PerflabError(f"the doctor reports no {finding} with {key!r} on the recorded {variant} trace")


@analysis
def measurement_ratio(ev: Any, numerator: str, denominator: str) -> Computed:
    """The ratio of two fields of measurements.json (dotted paths), e.g. slow / solution median ms."""
    m = ev.measurements()
    num, den = _dig(m, numerator, "measurements.json"), _dig(m, denominator, "measurements.json")
    if not isinstance(num, (int, float)) or not isinstance(den, (int, float)) or not den:
        raise PerflabError(f"measurements.json: {numerator} / {denominator} is not a ratio of numbers")
    return Computed(num / den, {numerator: num, denominator: den}, "the recorded measurements (measurements.json)")
