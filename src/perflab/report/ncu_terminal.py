"""The Nsight Compute part of the doctor's terminal summary: per kernel what limits it (speed of light per
unit, launch, occupancy, stalls) and ncu's own guided analysis beside ours."""
from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perflab.report.ncu_view import by_time, limit_cells, rule_line

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
MAX_KERNELS = 8


def _t(value: Any, style: str = "") -> Text:
    """Text from a file is data: never markup, no control characters."""
    return Text(_CONTROL.sub("", str(value)), style=style)


def render_ncu(report: Any, console: Console) -> None:
    kernels = by_time((report.analyses or {}).get("kernels"))
    if not kernels:
        return
    rows = [limit_cells(k) for k in kernels[:MAX_KERNELS]]
    table = Table(show_header=True, header_style="bold", expand=False,
                  title="what limits each kernel (units in % of peak over its duration)")
    for col in rows[0]:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(_t(v[:40] if col == "kernel" else v) for col, v in row.items()))
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
        console.print(_t(f"  {k.get('name', '')[:40]}: ") + _t(cmp.get("note", ""), "green" if cmp.get("agree") else "yellow"))
        for r in cmp.get("rules", [])[:4]:
            console.print(_t("    " + rule_line(r), "dim"))
