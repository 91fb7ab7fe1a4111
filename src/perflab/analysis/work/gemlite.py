"""GemLite's choice per batch size: which kernel family and configuration it ran, where its shipped
config file has no entry, and what the neighbouring family costs at the switch points.

The record (`gemlite.json`, written on the GPU machine by scripts/record.py gemlite-configs) is

    {"layer": {"N": 3072, "K": 8192, "group_size": 128, "W_nbits": 4, ...}, "sms": 132,
     "config_file": "h100.json",
     "selection": {"columns": ["M", "family", "M_bucket", "in_config_file"], "rows": [[1, "GEMV_REVSPLITK", 1, true], ...]},
     "calls":  [{"M": 16, "family": "GEMM_SPLITK", "config": {"BLOCK_SIZE_M": 16, ..., "SPLIT_K": 8, "num_warps": 4,
                 "num_stages": 1}, "source": "config file" | "autotuned on first call", "candidates": 1,
                 "autotune_s": 0.46, "gemlite_ms": 0.018, "bf16_ms": 0.024, ...}],
     "forced": [{"M": 64, "family": "GEMM_SPLITK", "config": {...}, "gemlite_ms": 0.019}]}

`selection` comes from GemLite's own selection code for every M in 1..4096 (no kernel run); `calls` are
measured layer calls; `forced` runs the neighbouring family by hand at the switch points.
Everything here is a pure function of that dict.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError, UnreadableInput

# thread blocks of each family's launch grid (gemlite/triton_kernels/*: `grid = lambda META: ...`)
GRID_K = {"GEMV": 1, "GEMV_REVSPLITK": 2}   # grid z = cdiv(K, BLOCK_SIZE_K * this); other families: SPLIT_K


def load(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnreadableInput(f"{path}: not a readable GemLite record ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("calls"), list) or "layer" not in data:
        raise UnreadableInput(f"{path}: not a GemLite record (no 'layer' and 'calls')")
    return data


def config_label(cfg: dict[str, Any]) -> str:
    tiles = "x".join(str(cfg.get(k, "?")) for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"))
    split = f" split-K {cfg['SPLIT_K']}" if "SPLIT_K" in cfg else ""
    return f"{tiles}{split} w{cfg.get('num_warps', '?')} s{cfg.get('num_stages', '?')}"


def ctas(family: str, cfg: dict[str, Any], m: int, n: int, k: int, *, split: bool = True) -> int | None:
    """Thread blocks of one launch: cdiv(M, BLOCK_M) x cdiv(N, BLOCK_N) x (split-K factor)."""
    try:
        bm, bn, bk = int(cfg["BLOCK_SIZE_M"]), int(cfg["BLOCK_SIZE_N"]), int(cfg["BLOCK_SIZE_K"])
    except (KeyError, TypeError, ValueError):
        return None
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    if not split:
        return tiles
    if family in GRID_K:
        return tiles * math.ceil(k / (bk * GRID_K[family]))
    return tiles * int(cfg.get("SPLIT_K", 1))


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per measured call, sorted by M, with the config flattened and the launch size derived."""
    layer, sms = doc["layer"], doc.get("sms")
    out = []
    for c in sorted(doc["calls"], key=lambda c: c.get("M", 0)):
        cfg = c.get("config") or {}
        m = int(c["M"])
        row = {k: v for k, v in c.items() if k not in ("tuned_now", "config")}
        row["config"] = config_label(cfg) if cfg else None
        row.update({f"config.{k}": v for k, v in cfg.items()})
        row["split_k"] = int(cfg.get("SPLIT_K", 1)) if cfg else None
        row["ctas"] = ctas(c["family"], cfg, m, layer["N"], layer["K"])
        row["ctas_without_split_k"] = ctas(c["family"], cfg, m, layer["N"], layer["K"], split=False)
        row["waves"] = round(row["ctas"] / sms, 3) if row["ctas"] and sms else None
        out.append(row)
    return out


def call(doc: dict[str, Any], m: int) -> dict[str, Any]:
    for r in rows(doc):
        if r["M"] == int(m):
            return r
    raise PerflabError(f"the GemLite record has no call at M={m} (measured: {', '.join(str(r['M']) for r in rows(doc))})")


def _selection(doc: dict[str, Any]) -> list[dict[str, Any]]:
    sel = doc.get("selection") or {}
    cols = sel.get("columns") or []
    if not cols or not sel.get("rows"):
        raise PerflabError("the GemLite record has no selection table (GemLite's family per M)")
    return [dict(zip(cols, r)) for r in sel["rows"]]


def switches(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Where GemLite's family changes: [{"M": first M, "family": ...}, ...] in M order."""
    out: list[dict[str, Any]] = []
    for r in _selection(doc):
        if not out or out[-1]["family"] != r["family"]:
            out.append({"M": r["M"], "family": r["family"]})
    return out


def switch_m(doc: dict[str, Any], family: str) -> int:
    """The first M at which GemLite selects `family`."""
    for s in switches(doc):
        if s["family"] == family:
            return int(s["M"])
    raise PerflabError(f"GemLite never selects {family!r} for this layer "
                       f"(families: {', '.join(s['family'] for s in switches(doc))})")


def holes(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs of M whose (family, M bucket) has no entry in the shipped config file: the first call of each
    bucket there autotunes (seconds of compiling and timing, in the middle of serving)."""
    out: list[dict[str, Any]] = []
    for r in _selection(doc):
        if r["in_config_file"]:
            continue
        if out and out[-1]["last"] == r["M"] - 1 and out[-1]["family"] == r["family"]:
            out[-1]["last"] = r["M"]
            out[-1]["count"] += 1
            if r["M_bucket"] not in out[-1]["buckets"]:
                out[-1]["buckets"].append(r["M_bucket"])
        else:
            out.append({"first": r["M"], "last": r["M"], "count": 1, "family": r["family"], "buckets": [r["M_bucket"]]})
    return out


def forced(doc: dict[str, Any], m: int) -> dict[str, Any]:
    """At M: the family GemLite picks (its call) against the neighbouring family forced by hand."""
    auto = call(doc, m)
    alt = [f for f in doc.get("forced", []) if f.get("M") == int(m) and f.get("gemlite_ms")]
    if not alt:
        raise PerflabError(f"the GemLite record forced no other family at M={m}")
    f = alt[0]
    return {"M": int(m), "picked": auto["family"], "picked_config": auto["config"], "picked_ms": auto["gemlite_ms"],
            "forced": f["family"], "forced_config": config_label(f.get("config") or {}), "forced_ms": f["gemlite_ms"],
            "forced_in_config_file": f.get("in_config_file"), "picked_over_forced": auto["gemlite_ms"] / f["gemlite_ms"]}


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    return {"layer": doc["layer"], "gpu": doc.get("gpu"), "gemlite": doc.get("gemlite"),
            "config_file": doc.get("config_file"), "switches": switches(doc), "holes": holes(doc),
            "calls": rows(doc)}


def markdown_table(doc: dict[str, Any]) -> str:
    """The puzzle README's table of GemLite's choice per M, every cell from the record (none typed)."""
    lines = ["| M | family | config (BLOCK MxNxK, split-K, warps, stages) | from | thread blocks (waves) "
             "| GemLite µs | bf16 F.linear µs |", "|---|---|---|---|---|---|---|"]
    for r in rows(doc):
        if r.get("error"):
            lines.append(f"| {r['M']} | {r['family']} | error: {str(r['error'])[:60]} | | | | |")
            continue
        src = ("config file" if r.get("source") == "config file"
               else f"autotuned: {r.get('candidates')} configs, {r.get('autotune_s', 0):.1f} s")
        waves = f" ({r['waves']:.2f})" if r.get("waves") is not None else ""
        lines.append(f"| {r['M']} | {r['family']} | {r['config']} | {src} | {r['ctas']}{waves} "
                     f"| {r['gemlite_ms'] * 1e3:.1f} | {r['bf16_ms'] * 1e3:.1f} |")
    return "\n".join(lines)
