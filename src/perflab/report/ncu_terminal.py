"""The Nsight Compute part of the doctor's terminal summary: per kernel what limits it (speed of light per
unit, launch, occupancy, stalls) and ncu's own guided analysis beside ours."""
from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
MAX_KERNELS = 8


def _t(value: Any, style: str = "") -> Text:
    """Text from a file is data: never markup, no control characters."""
    return Text(_CONTROL.sub("", str(value)), style=style)


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


def render_ncu(report: Any, console: Console) -> None:
    kernels = sorted((k for k in (report.analyses or {}).get("kernels") or [] if isinstance(k, dict)),
                     key=lambda k: -(k.get("time_share_pct") or 0))
    if not kernels:
        return
    table = Table(show_header=True, header_style="bold", expand=False,
                  title="what limits each kernel (units in % of peak over its duration)")
    for col in ("kernel", "time %", "busiest units", "launch", "occupancy", "top stalls", "ours"):
        table.add_column(col, overflow="fold")
    for k in kernels[:MAX_KERNELS]:
        lim = k.get("limits") or {}
        table.add_row(_t(k.get("name", "")[:40]), _t(f"{k.get('time_share_pct', 0):.0f}"),
                      _t(_units(lim.get("units_pct") or {})), _t(_launch(lim.get("launch") or {})),
                      _t(_occupancy(lim.get("occupancy") or {})), _t(_stalls(lim.get("stalls"))),
                      _t(", ".join(k.get("findings") or [])))
    console.print(table)
    if len(kernels) > MAX_KERNELS:
        console.print(_t(f"and {len(kernels) - MAX_KERNELS} more kernels (--json has them all)", "dim"))
    note = (report.analyses or {}).get("ncu_rules_note")
    if note:
        console.print(_t(note, "dim"))
        return
    console.print(_t("Nsight Compute's own analysis beside ours:", "bold"))
    for k in kernels[:MAX_KERNELS]:
        cmp = k.get("ncu_rules")
        if not cmp:
            continue
        style = "green" if cmp.get("agree") else "yellow"
        console.print(_t(f"  {k.get('name', '')[:40]}: ") + _t(cmp.get("note", ""), style))
        for r in cmp.get("rules", [])[:4]:
            est = f" est. {r['speedup_pct']:.0f} % {r.get('speedup_scope') or ''}".rstrip() if r.get("speedup_pct") else ""
            title = f": {r['title']}" if r.get("title") else ""
            console.print(_t(f"    [{r.get('kind')}] {r.get('rule')}{title}{est} -> {r.get('id') or 'no taxonomy id'}",
                             "dim"))
