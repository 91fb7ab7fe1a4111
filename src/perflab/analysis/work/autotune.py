"""Autotuning logs: which configuration a tuned kernel ran for each shape, against every alternative.

A log (`<variant>.autotune.json`, written by perflab.puzzles.evidence.autotune on the GPU) is

    {"kernel": "matmul_kernel", "key_args": ["N", "K"], "sms": 132, "device": "...",
     "cache": [{"key": [...], "config": {...}}],            # what the autotuner holds
     "calls": [{"name": "decode", "shape": {"M": 16, "N": 8192, "K": 8192},
                "config_used": {"BLOCK_M": 128, ..., "num_warps": 8, "num_stages": 3},
                "timings": [{"config": {...}, "ms": 0.21}, ...]}]}

`rows` gives, per call, the configuration used against the best one measured on that shape and the tile
padding; doctor/autotune.py turns them into findings.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from perflab.errors import UnreadableInput

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
