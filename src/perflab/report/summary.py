"""Rendering evidence summaries (the dict of perflab.analysis.reports.summary.evidence_summary) with rich."""
from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

KERNEL_NAME_WIDTH = 70


def fmt_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"  # pragma: no cover


def fmt_num(value: Any, digits: int = 3) -> str:
    """Numbers with `digits` significant digits (no scientific notation for everyday sizes)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if value == 0:
        return "0"
    mag = abs(value)
    decimals = max(0, digits - 1 - int(f"{mag:e}".split("e")[1]))
    return f"{value:,.{min(decimals, 6)}f}"


def short(name: str, width: int = KERNEL_NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def headline(summary: dict[str, Any]) -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column(justify="right")
    syncs = summary.get("syncs", {})
    rows = [
        ("device", summary.get("device") or "-"),
        ("profiled steps", fmt_num(summary.get("steps"))),
        ("step time (median, profiled)", f"{fmt_num(summary.get('step_time_ms'))} ms"),
        ("profiled span", f"{fmt_num(summary.get('span_ms'))} ms"),
        ("GPU busy", f"{fmt_num(summary.get('gpu_busy_pct'))} %"),
        ("kernels per step", fmt_num(summary.get("kernels_per_step"))),
        ("mean kernel time", f"{fmt_num(summary.get('mean_kernel_us'))} µs"),
        ("host syncs per step", fmt_num(syncs.get("per_step"))),
    ]
    for key, value in rows:
        t.add_row(key, value)
    return t


def kernels_table(summary: dict[str, Any], limit: int = 5) -> Table | None:
    kernels = summary.get("top_kernels") or []
    if not kernels:
        return None
    t = Table(title="top kernels (by total time)", title_justify="left", show_edge=False)
    t.add_column("kernel")
    t.add_column("count", justify="right")
    t.add_column("total µs", justify="right")
    t.add_column("%", justify="right")
    for k in kernels[:limit]:
        t.add_row(short(k["name"]), fmt_num(k["count"]), fmt_num(k["total_us"]), fmt_num(k["pct"]))
    return t


def copies_table(summary: dict[str, Any]) -> Table | None:
    copies = {d: c for d, c in (summary.get("copies") or {}).items() if c.get("count")}
    if not copies:
        return None
    t = Table(title="memory copies", title_justify="left", show_edge=False)
    for col in ("direction", "count", "bytes", "pageable", "total µs", "GB/s"):
        t.add_column(col, justify="left" if col == "direction" else "right")
    for d, c in sorted(copies.items()):
        t.add_row(d, fmt_num(c["count"]), fmt_bytes(c.get("bytes")), fmt_num(c.get("pageable_count", 0)),
                  fmt_num(c.get("total_us")), fmt_num(c.get("gbps")))
    return t


def syncs_line(summary: dict[str, Any]) -> Text | None:
    names = (summary.get("syncs") or {}).get("names") or {}
    if not names:
        return None
    parts = ", ".join(f"{n} ×{c}" for n, c in sorted(names.items(), key=lambda kv: -kv[1]))
    return Text.assemble(("host syncs: ", "bold"), parts)


def render_summary(summary: dict[str, Any], *, title: str, label: str,
                   measurements: dict[str, Any] | None = None) -> RenderableType:
    """The evidence of one run: the label says whether it is live or a replay, and of what."""
    parts: list[RenderableType] = [Text(title, style="bold"), Text(label, style="yellow"), headline(summary)]
    parts += [p for p in (kernels_table(summary), copies_table(summary), syncs_line(summary)) if p is not None]
    if measurements:
        parts.append(measurements_line(measurements))
    return Group(*parts)


def measurements_line(m: dict[str, Any]) -> Text:
    bits = [f"{v} median {fmt_num(m[v]['median_ms'])} ms (n={m[v].get('n', len(m[v].get('samples_ms', [])))})"
            for v in ("slow", "solution", "mine") if isinstance(m.get(v), dict) and "median_ms" in m[v]]
    bits += [f"{name} median {fmt_num(st['median_ms'])} ms ({fmt_num(st.get('speedup_vs_slow'))}× slow)"  # `stages`
             for name, st in (m.get("stages") or {}).items() if isinstance(st, dict) and "median_ms" in st]
    sp = m.get("speedup")
    if isinstance(sp, dict) and "point" in sp:
        bits.append(f"speed-up {fmt_num(sp['point'])}× (95 % CI {fmt_num(sp.get('ci_low'))}–"
                    f"{fmt_num(sp.get('ci_high'))}, bar {fmt_num(sp.get('bar'))})")
    return Text.assemble(("timed without the profiler: ", "bold"), "; ".join(bits),
                         ("\n(the profiled step time above was measured under torch.profiler, which adds its own "
                          "cost; speed-ups are from these timings)", "dim"))


def evidence_table(evidence: dict[str, Any], source: str) -> RenderableType:
    """The numbers behind a computed answer (shown after a wrong one)."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    for key, value in evidence.items():
        t.add_row(f"  {key}", short(fmt_num(value), 100))
    return Group(Text(f"  evidence from {source}:"), t)
