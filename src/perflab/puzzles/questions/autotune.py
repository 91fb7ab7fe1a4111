"""Analyses over a recording's autotuning logs (`<variant>.autotune.json`, puzzles with tools = ["autotune"]):
the findings computed from them (analysis/work/autotune.py: autotune-miss, tile-quantization) and any
number of one call's row (the config used, the best one, their times, the tile padding)."""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis
from perflab.puzzles.engine.spec import display_path


def autotune_log(ev: Any, variant: str) -> dict[str, Any]:
    from perflab.analysis.work.autotune import load
    from perflab.puzzles.evidence.autotune import log_file

    cache = ev.__dict__.setdefault("_autotune_cache", {})
    if variant not in cache:
        path = log_file(ev.folder, variant)
        if not path.is_file():
            raise PerflabError(f"no recorded {variant} autotuning log at {display_path(path)}: {ev._record_hint()}")
        cache[variant] = load(path)
    return cache[variant]


def _source(variant: str) -> str:
    return f"the recorded {variant} autotuning log ({variant}.autotune.json)"


@analysis
def autotune_top_id(ev: Any, variant: str = "slow") -> Computed:
    """The most important finding computed from the autotuning log."""
    from perflab.doctor.autotune import findings

    found = findings(autotune_log(ev, variant))
    if not found:
        return Computed("healthy", {"findings": "none: every call ran its best measured config"}, _source(variant))
    top = found[0]
    evidence = {"top finding": top.id, "severity": top.severity, "estimated gain %": top.gain_pct,
                **{k: v for k, v in top.evidence.items() if isinstance(v, (int, float, str))}}
    if len(found) > 1:
        evidence["next findings"] = ", ".join(f"{f.id} ({f.severity})" for f in found[1:4])
    return Computed(top.id, evidence, f"perflab's autotune analysis of {_source(variant)}")


@analysis
def autotune_value(ev: Any, field: str, call: str = "", variant: str = "slow") -> Computed:
    """A field of one call's row: slowdown, used_ms, best_ms, used_ctas, tile_waste_m_pct, config_used.BLOCK_M, ..."""
    from perflab.analysis.work.autotune import rows

    table = rows(autotune_log(ev, variant))
    picked = [r for r in table if not call or r["name"] == call]
    if not picked:
        raise PerflabError(f"{_source(variant)} has no call {call!r} (calls: {', '.join(r['name'] for r in table)})")
    row = picked[0]
    if row.get(field) is None:
        raise PerflabError(f"{_source(variant)}: call {row['name']!r} has no value {field!r}")
    evidence = {k: row[k] for k in ("name", "used", "best", "used_ms", "best_ms", "slowdown", "used_ctas")}
    evidence[field] = row[field]
    evidence["all configs (ms)"] = "; ".join(f"{t['config']}: {t['ms']:.3f}" for t in row["timings"])
    return Computed(row[field], evidence, _source(variant))
