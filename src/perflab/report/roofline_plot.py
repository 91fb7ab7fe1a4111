"""Draw a RooflineModel: log-log, every roof labelled, every kernel labelled (matplotlib, lazily).

`.png`/`.svg`/`.pdf` write the figure; `.html` writes a page with the figure embedded and the table
of kernels under it.
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from perflab.analysis.work.roofline import RooflineModel
from perflab.errors import PerflabError
from perflab.outputs import write_output
from perflab.report.console import clean
from perflab.report.plotting import pyplot, save_figure

COMPUTE_ORDER = ("fp8", "bf16", "fp16", "tf32", "fp32_fma", "fp32", "fp64")


def _figure(model: RooflineModel):
    import numpy as np

    plt = pyplot()

    bw = model.ceilings.dram.value
    roofs = {**model.ceilings.compute, **model.extra_roofs}
    shown = [k for k in COMPUTE_ORDER if k in roofs and not (k == "fp32" and "fp32_fma" in roofs)]
    xs = [p.intensity for p in model.points if p.intensity]
    x_lo = min([0.01] + [x / 3 for x in xs])
    x_hi = max([1e4] + [x * 3 for x in xs])
    top = max(roofs[k].value for k in shown)
    ys = [p.flops_per_s for p in model.points if p.flops_per_s > 0]
    y_lo = min([top / 1e5] + [y / 3 for y in ys])

    fig, ax = plt.subplots(figsize=(10, 6.5), dpi=120)
    x = np.logspace(np.log10(x_lo), np.log10(x_hi), 400)
    colors = plt.get_cmap("tab10")
    for i, key in enumerate(shown):
        roof = roofs[key]
        ax.plot(x, np.minimum(roof.value, bw * x), color=colors(i), lw=1.8, alpha=0.9)
        ridge = roof.value / bw
        ax.text(ridge * 1.15, roof.value * (1.06 if i % 2 == 0 else 0.80), f"{roof.name} {roof.value / 1e12:,.0f} TFLOP/s "
                f"(ridge {ridge:,.0f})", ha="left", va="bottom", fontsize=7.5, color=colors(i))
        ax.axvline(ridge, color=colors(i), lw=0.5, ls=":", alpha=0.6)
    mem = model.ceilings.dram
    x_lab = max(x_lo * 3, y_lo * 3 / bw)
    ax.text(x_lab, bw * x_lab * 1.3, f"DRAM {bw / 1e12:.2f} TB/s", rotation=0, fontsize=8, color="black")
    if "l2" in model.ceilings.memory:
        l2 = model.ceilings.memory["l2"].value
        ax.plot(x, np.minimum(top, l2 * x), color="grey", lw=1, ls="--")
        ax.text(x_lab, l2 * x_lab * 1.3, f"L2 {l2 / 1e12:.1f} TB/s", fontsize=8, color="grey")
    no_flops, labelled = [], []
    for p in model.points:
        if p.flops_per_s > 0 and p.intensity:
            ax.scatter([p.intensity], [p.flops_per_s], s=40, zorder=5, color="crimson", edgecolor="black", lw=0.5)
            labelled.append(p)
        else:  # a kernel without FLOPs has no place on a FLOP/s axis: listed with its DRAM rate instead
            no_flops.append(f"{p.name[:40]}: {p.dram_bytes_per_s / 1e9:,.0f} GB/s ({p.pct_of_roof:.0f} % of DRAM roof)")
    if no_flops:
        ax.text(0.99, 0.02, "kernels without FLOPs\n" + "\n".join(no_flops), transform=ax.transAxes, ha="right",
                va="bottom", fontsize=7, family="monospace", bbox={"facecolor": "white", "alpha": 0.85, "lw": 0.5})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, top * 2)
    _place_labels(ax, labelled)
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(True, which="major", ls="-", alpha=0.25)
    ax.grid(True, which="minor", ls=":", alpha=0.12)
    device = model.device or "unknown GPU"
    paths = [q for q in model.path.split(", ") if q]
    where = Path(paths[0]).name if len(paths) == 1 else f"{len(paths)} reports"
    ax.set_title(f"Roofline — {device}\n{where}", fontsize=11)
    fig.text(0.01, 0.005, f"ceilings: {model.ceilings.source}; DRAM roof {mem.source}", fontsize=7, color="dimgray")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def check_roofline_path(out: str | Path) -> Path:
    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg", ".pdf", ".html", ".htm"):
        raise PerflabError(f"{out}: the roofline is written as .png, .svg, .pdf or .html")
    return out


def save_roofline(model: RooflineModel, out: str | Path, *, force: bool = False, inputs=()) -> Path:
    out = check_roofline_path(out)
    fig = _figure(model)
    if out.suffix.lower() not in (".html", ".htm"):
        return save_figure(fig, out, force=force, inputs=inputs)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png")
    finally:
        pyplot().close(fig)
    return write_output(out, _html(model, base64.b64encode(buf.getvalue()).decode()), force=force, inputs=inputs)


def _esc(text: str) -> str:
    return html.escape(clean(text))


def _html(model: RooflineModel, png_b64: str) -> str:
    rows = "".join(
        f"<tr><td>{_esc(p.name)}</td><td>{'-' if p.intensity is None else f'{p.intensity:.2f}'}</td>"
        f"<td>{p.flops_per_s / 1e12:.2f}</td><td>{p.dram_bytes_per_s / 1e9:.0f}</td><td>{_esc(p.roof)}</td>"
        f"<td>{p.bound}</td><td>{p.pct_of_roof:.0f}</td></tr>" for p in model.points)
    return ("<!doctype html><html><head><meta charset='utf-8'><title>perflab roofline</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}</style></head><body>"
            f"<h2>Roofline — {_esc(model.device or 'unknown GPU')}</h2>"
            f"<p>{_esc(model.path)}<br>ceilings: {_esc(model.ceilings.source)}</p>"
            f"<img alt='roofline' src='data:image/png;base64,{png_b64}'>"
            "<table><tr><th>kernel</th><th>FLOP/byte</th><th>TFLOP/s</th><th>GB/s</th><th>roof</th>"
            f"<th>bound</th><th>% of roof</th></tr>{rows}</table></body></html>")


def roofline_png(model: RooflineModel) -> bytes:
    """The roofline figure as PNG bytes (for embedding, e.g. in the HTML report)."""
    fig = _figure(model)
    import matplotlib.pyplot as plt

    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return buf.getvalue()


def _place_labels(ax, points) -> None:
    """Label each point beside it, moving a label up or down until it overlaps no earlier label
    (boxes estimated in display pixels: fontsize 7 is about 4.3 px per character, 10 px high)."""
    fig_dpi = ax.figure.dpi / 100.0
    boxes = []
    for p in sorted(points, key=lambda q: (q.flops_per_s, q.intensity)):
        text = f"{p.name[:32]} ({p.pct_of_roof:.0f} % of roof)"
        x, y = ax.transData.transform((p.intensity, p.flops_per_s))
        w, h = 4.3 * len(text) * fig_dpi, 10 * fig_dpi
        for dy in (3, -10, 14, -21, 25, -32, 36, -43, 47, -54):
            box = (x + 6 * fig_dpi, y + dy * fig_dpi, x + 6 * fig_dpi + w, y + dy * fig_dpi + h)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in boxes):
                break
        boxes.append(box)
        ax.annotate(text, (p.intensity, p.flops_per_s), textcoords="offset points", xytext=(6, dy), fontsize=7)
