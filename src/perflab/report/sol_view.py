"""The speed-of-light analysis of a trace (analyses.speed_of_light) as the terminal and the HTML page show it."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perflab.report import svg

FAMILY_COLUMNS = ("family", "ms/step", "at speed of light", "% of roof", "TFLOP/s", "GB/s")


def family_rows(sol: dict) -> list[tuple[str, ...]]:
    rows = []
    for name, f in sol["families"].items():
        rows.append((name, svg.fmt(f["time_us"] / 1e3, ""), "-" if f.get("pct_of_roof") is None else
                     svg.fmt(f["sol_us"] / 1e3, ""), svg.fmt(f.get("pct_of_roof"), "%"),
                     svg.fmt(f.get("tflops")), svg.fmt(f.get("gbps"))))
    return rows


def unmodelled_line(sol: dict) -> str:
    words = {"no_shapes": "no shapes recorded (profile with record_shapes=True)", "unknown_op": "ops the model does not know",
             "no_op": "kernels with no recorded op (launched outside torch ops, or their launch went unrecorded)", "graph_replay": "replayed from CUDA graphs",
             "no_bytes": "copies with no byte count"}
    parts = [f"{u['us'] / 1e3:.3f} ms/step {words.get(k, k)} ({', '.join(list(u['names'])[:2])[:90]})"
             for k, u in sol["unmodelled"].items() if u["us"] > 0]
    return "not priced: " + "; ".join(parts) if parts else ""


def render_sol(console: Console, sol: dict | None) -> None:
    if not sol or not sol.get("families"):
        if sol and not sol.get("shapes_recorded"):
            console.print(Text("speed of light: not judged, the trace has no op shapes (profile with "
                               "record_shapes=True)", style="dim"))
        return
    console.print(Text("speed of light: " + sol["sentence"], style="dim"))
    table = Table(show_header=True, header_style="bold", expand=False, title=f"ceilings: {sol['ceilings']['source']}")
    for col in FAMILY_COLUMNS:
        table.add_column(col, overflow="fold", justify="left" if col == "family" else "right")
    for row in family_rows(sol)[:8]:
        table.add_row(*row)
    console.print(table)
    line = unmodelled_line(sol)
    if line:
        console.print(Text(line, style="dim"))


def sol_context(sol: dict | None) -> dict[str, Any] | None:
    """Rows, ops and a roofline drawing for the HTML page."""
    if not sol or not sol.get("families"):
        return None
    c = sol["ceilings"]
    modelled = sum(o["time_us"] for o in sol["ops"]) or 1.0
    points = [(f"{o['op']} {o.get('dims', '')[:60]}", o["flops"] / o["bytes"], o["flops"] / (o["time_us"] * 1e-6),
               o["time_us"] / modelled) for o in sol["ops"] if o.get("flops") and o.get("bytes") and o["time_us"] > 0]
    roofs = [(p, v * 1e12) for p, v in (c.get("compute_tflops") or {}).items() if p in ("bf16", "tf32", "fp32", "fp8")]
    drawing = svg.roofline(points, (c.get("dram_gbps") or 0) * 1e9, roofs) if c.get("dram_gbps") else ""
    return {"sentence": sol["sentence"], "ceilings": c["source"], "columns": FAMILY_COLUMNS,
            "families": family_rows(sol), "unmodelled": unmodelled_line(sol), "roofline_svg": drawing,
            "ops": [{"op": o["op"], "dims": o.get("dims", "")[:80], "ms": svg.fmt(o["time_us"] / 1e3),
                     "sol_ms": svg.fmt((o.get("sol_us") or 0) / 1e3), "pct": svg.fmt(o.get("pct_of_roof"), "%"),
                     "bound": o.get("bound") or "-"} for o in sol["ops"][:12]]}
