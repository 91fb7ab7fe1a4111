"""Findings from an autotuning log (analysis/work/autotune.py): `autotune-miss` when the configuration used for a
shape is measurably slower than the best one measured for that same shape, and `tile-quantization` when the
used tile pads the shape heavily (its gain bounded by what the best configuration saves)."""
from __future__ import annotations

from typing import Any

from perflab.analysis.work.autotune import rows
from perflab.doctor.finding import Finding, rank

MISS_RATIO = 1.2        # used / best above this is a miss (timing noise stays well below)
TILE_WASTE = 0.10


def _severity(gain: float) -> str:
    return "high" if gain >= 30 else "medium" if gain >= 10 else "low" if gain >= 3 else "info"


def findings(log: dict[str, Any]) -> list[Finding]:
    key_args = log.get("key_args") or []
    out: list[Finding] = []
    for r in rows(log):
        if r["slowdown"] is None:
            continue
        gain = 100 * (1 - 1 / r["slowdown"])
        dims = [d for d in ("M", "N", "K") if d in r["shape"] and d not in key_args]
        ev = {"call": r["name"], **{f"shape_{k}": v for k, v in r["shape"].items()}, "config_used": r["used"],
              "config_best": r["best"], "used_ms": r["used_ms"], "best_ms": r["best_ms"],
              "slowdown": round(r["slowdown"], 3), "autotune_key": ",".join(key_args) or "none",
              "shape_dims_not_in_key": ",".join(dims) or "none", "used_ctas": r["used_ctas"], "sms": log.get("sms")}
        if r["slowdown"] >= MISS_RATIO:
            why = (f"the autotune key ({', '.join(key_args)}) ignores {', '.join(dims)}, so a config tuned for another "
                   f"shape is reused" if dims else "the config space or a stale cached choice misses this shape")
            out.append(Finding(
                id="autotune-miss", severity=_severity(gain), gain_pct=round(gain, 1), evidence=ev,
                fix="Make the autotuner see this shape: add the missing dimension (or a bucket of it) to the key, "
                    "add configurations suited to it (small BLOCK_M, split-K for skinny GEMMs), or clear a stale cache.",
                summary=f"{log.get('kernel', 'kernel')} [{r['name']}]: runs {r['used']} at {r['used_ms']:.3f} ms where "
                        f"{r['best']} takes {r['best_ms']:.3f} ms ({r['slowdown']:.1f}x); {why}"))
        worst = max(r["tile_waste_m_pct"], r["tile_waste_n_pct"]) / 100
        if worst >= TILE_WASTE:
            dim = "M" if r["tile_waste_m_pct"] >= r["tile_waste_n_pct"] else "N"
            twaste = min(100 * worst, gain) if r["slowdown"] >= 1 else 0.0
            out.append(Finding(
                id="tile-quantization", severity=_severity(twaste), gain_pct=round(twaste, 1),
                evidence={**ev, "tile_waste_m_pct": r["tile_waste_m_pct"], "tile_waste_n_pct": r["tile_waste_n_pct"]},
                fix="Use a tile that fits the shape (BLOCK_M close to M for skinny GEMMs) or pad/batch the inputs.",
                summary=f"{log.get('kernel', 'kernel')} [{r['name']}]: {r['used']} pads {dim}="
                        f"{r['shape'].get(dim)} so {100 * worst:.0f} % of each tile's {dim} rows are padding"))
    return rank(out)
