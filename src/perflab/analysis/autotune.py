"""Autotuning logs: which configuration a tuned kernel ran for each shape, against every alternative.

A log (`<variant>.autotune.json`, written by perflab.puzzles.evidence.autotune on the GPU) is

    {"kernel": "matmul_kernel", "key_args": ["N", "K"], "sms": 132, "device": "...",
     "cache": [{"key": [...], "config": {...}}],            # what the autotuner holds
     "calls": [{"name": "decode", "shape": {"M": 16, "N": 8192, "K": 8192},
                "config_used": {"BLOCK_M": 128, ..., "num_warps": 8, "num_stages": 3},
                "timings": [{"config": {...}, "ms": 0.21}, ...]}]}

`findings` turns it into doctor findings: `autotune-miss` when the configuration used for a shape is
measurably slower than the best one measured for that same shape, and `tile-quantization` when the
used tile pads the shape heavily (its gain bounded by what the best configuration saves).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from perflab.doctor.finding import Finding
from perflab.errors import UnreadableInput

MISS_RATIO = 1.2        # used / best above this is a miss (timing noise stays well below)
TILE_WASTE = 0.10
TILE_KEYS = (("BLOCK_M", "M"), ("BLOCK_N", "N"))


def load(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnreadableInput(f"{path}: not a readable autotuning log ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("calls"), list):
        raise UnreadableInput(f"{path}: not an autotuning log (no 'calls' list)")
    return data


def config_label(cfg: dict[str, Any]) -> str:
    tiles = "x".join(str(cfg[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k in cfg)
    rest = [f"{k}={v}" for k, v in cfg.items() if k not in ("BLOCK_M", "BLOCK_N", "BLOCK_K")]
    return " ".join([tiles, *rest]) if tiles else " ".join(rest)


def tile_waste(cfg: dict[str, Any], shape: dict[str, Any]) -> dict[str, float]:
    """Share of each tiled dimension that is padding: 1 - size / (tiles x tile)."""
    out = {}
    for tile_key, dim in TILE_KEYS:
        if tile_key in cfg and dim in shape and cfg[tile_key] and shape[dim]:
            t, n = int(cfg[tile_key]), int(shape[dim])
            out[dim] = 1 - n / (math.ceil(n / t) * t)
    return out


def ctas(cfg: dict[str, Any], shape: dict[str, Any]) -> int | None:
    """Program instances (thread blocks) of a 2-D tiled launch; SPLIT_K multiplies them."""
    if not all(k in cfg for k in ("BLOCK_M", "BLOCK_N")) or not all(d in shape for d in ("M", "N")):
        return None
    n = math.ceil(shape["M"] / cfg["BLOCK_M"]) * math.ceil(shape["N"] / cfg["BLOCK_N"])
    return n * int(cfg.get("SPLIT_K", 1))


def analyze_call(call: dict[str, Any]) -> dict[str, Any]:
    """One shape: the used configuration's time against the best measured one."""
    used = call.get("config_used") or {}
    timings = [t for t in call.get("timings", []) if isinstance(t.get("ms"), (int, float)) and math.isfinite(t["ms"])]
    if not timings:
        raise UnreadableInput(f"autotuning log: call {call.get('name')!r} has no timings")
    best = min(timings, key=lambda t: t["ms"])
    used_ms = next((t["ms"] for t in timings if t["config"] == used), None)
    shape = call.get("shape", {})
    waste = tile_waste(used, shape)
    row = {"name": call.get("name", ""), "shape": shape, "config_used": used, "config_best": best["config"],
           "used": config_label(used), "best": config_label(best["config"]), "used_ms": used_ms, "best_ms": best["ms"],
           "slowdown": (used_ms / best["ms"]) if used_ms and best["ms"] else None,
           "used_ctas": ctas(used, shape), "best_ctas": ctas(best["config"], shape),
           "tile_waste_m_pct": round(100 * waste.get("M", 0.0), 2), "tile_waste_n_pct": round(100 * waste.get("N", 0.0), 2),
           "timings": [{"config": config_label(t["config"]), "ms": t["ms"]} for t in timings]}
    for k, v in used.items():
        row[f"config_used.{k}"] = v
    for k, v in best["config"].items():
        row[f"config_best.{k}"] = v
    return row


def rows(log: dict[str, Any]) -> list[dict[str, Any]]:
    return [analyze_call(c) for c in log["calls"]]


def _severity(gain: float) -> str:
    return "high" if gain >= 30 else "medium" if gain >= 10 else "low" if gain >= 3 else "info"


def findings(log: dict[str, Any]) -> list[Finding]:
    from perflab.doctor.finding import rank

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
