"""The Nsight Compute numbers behind a report, as short strings for the terminal and the HTML page: per
kernel what limits it (analyses.kernels[].limits) and ncu's own rules beside ours (.ncu_rules)."""
from __future__ import annotations

from typing import Any


def _units(units: dict[str, float], n: int = 3) -> str:
    top = sorted(units.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {v:.0f}" for k, v in top) or "-"


def _launch(shape: dict) -> str:
    if not shape.get("grid_blocks"):
        return "-"
    text = f"{shape['grid_blocks']:,} x {shape.get('block_threads') or '?'} on {shape.get('sms') or '?'} SMs"
    waves = shape.get("waves_per_sm")
    return text + (f", {waves:.2f} waves" if waves is not None else "")


def _occupancy(occ: dict) -> str:
    if occ.get("achieved_pct") is None:
        return "-"
    text = f"{occ['achieved_pct']:.0f} of {occ.get('theoretical_pct') or 0:.0f} %"
    why = occ.get("achieved_limiter") or occ.get("theoretical_limiter")
    return text + (f" ({why})" if why else "")


def _stalls(stalls: list[dict] | None) -> str:
    return ", ".join(f"{s['reason']} {s['pct']:.0f} %" for s in (stalls or [])[:3]) or "-"


def limit_cells(kernel: dict[str, Any]) -> dict[str, str]:
    """kernel, time %, busiest units, launch, occupancy, top stalls, our findings."""
    lim = kernel.get("limits") or {}
    return {"kernel": str(kernel.get("name", "")), "time %": f"{kernel.get('time_share_pct') or 0:.0f}",
            "busiest units (% of peak)": _units(lim.get("units_pct") or {}), "launch": _launch(lim.get("launch") or {}),
            "occupancy": _occupancy(lim.get("occupancy") or {}), "top stalls": _stalls(lim.get("stalls")),
            "ours": ", ".join(kernel.get("findings") or [])}


def rule_line(rule: dict[str, Any]) -> str:
    est = f" est. {rule['speedup_pct']:.0f} % {rule.get('speedup_scope') or ''}".rstrip() if rule.get("speedup_pct") else ""
    title = f": {rule['title']}" if rule.get("title") else ""
    return f"[{rule.get('kind')}] {rule.get('rule')}{title}{est} -> {rule.get('id') or 'no taxonomy id'}"


def by_time(kernels: list[Any]) -> list[dict[str, Any]]:
    return sorted((k for k in kernels or [] if isinstance(k, dict)), key=lambda k: -(k.get("time_share_pct") or 0))
