"""Small inline SVG charts for the HTML report: no JavaScript, no fonts or files from elsewhere.

Every function takes plain numbers (from the doctor's analyses or a Diff) and returns one `<svg>`
element as a string; every label is escaped. Hovering a mark shows its value (an SVG <title>).
"""
from __future__ import annotations

import itertools
import math
import statistics
from html import escape
from typing import Sequence

PALETTE = ("#2471a3", "#c0392b", "#27ae60", "#8e44ad", "#d68910", "#17a589", "#7f8c8d", "#2e4053")
TYPE_COLORS = {"gemm": "#2471a3", "conv": "#1a5276", "attention": "#8e44ad", "elementwise": "#d68910",
               "reduction": "#17a589", "memcpy": "#c0392b", "memset": "#e6b0aa", "communication": "#27ae60",
               "other": "#7f8c8d"}
_IDS = itertools.count(1)
FONT = "font-family='system-ui,sans-serif' font-size='11'"


def _num(v: float) -> str:
    """Compact coordinates."""
    return f"{v:.1f}".rstrip("0").rstrip(".")


def fmt(v: float, unit: str = "") -> str:
    if v is None or not math.isfinite(v):
        return "-"
    mag = abs(v)
    text = f"{v:,.0f}" if mag >= 100 else f"{v:.3g}"
    return f"{text} {unit}".rstrip()


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _svg(width: int, height: int, body: str, label: str, cls: str) -> str:
    return (f"<svg class='{escape(cls)}' xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"viewBox='0 0 {width} {height}' role='img' aria-label='{escape(label)}'>{body}</svg>")


def step_series(series: Sequence[tuple[str, Sequence[float]]], *, unit: str = "ms", width: int = 680,
                height: int = 220, label: str = "step time per step", colors: Sequence[str] = PALETTE) -> str:
    """One line per series over the step index, with each series' median dashed. The y axis turns
    logarithmic when the values span more than 20×."""
    series = [(name, [float(v) for v in values]) for name, values in series if values]
    left, right, top, bottom = 56, 150, 12, 30
    pw, ph = width - left - right, height - top - bottom
    if not series:
        return _svg(width, 40, f"<text x='8' y='24' {FONT}>no steps in this profile</text>", label, "chart steps")
    n = max(len(v) for _, v in series)
    hi = max(max(v) for _, v in series) * 1.08
    hi = hi if hi > 0 else 1.0
    positive = [v for _, vs in series for v in vs if v > 0]
    lo = min(positive) / 1.3 if positive else 0.0
    log = bool(positive) and hi / lo > 20 and all(v > 0 for _, vs in series for v in vs)
    if log:
        ticks = [10.0 ** e * m for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                 for m in (1, 2, 5) if lo <= 10.0 ** e * m <= hi]
    else:
        ticks = nice_ticks(0.0, hi)
        hi = max(hi, ticks[-1])

    def x(i: int) -> float:
        return left + (pw * i / (n - 1) if n > 1 else pw / 2)

    def y(v: float) -> float:
        if log:
            return top + ph - ph * (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        return top + ph - ph * v / hi

    body = [f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='#fafafa' stroke='#ddd'/>"]
    for t in ticks:
        body.append(f"<line x1='{left}' x2='{left + pw}' y1='{_num(y(t))}' y2='{_num(y(t))}' stroke='#eee'/>"
                    f"<text x='{left - 4}' y='{_num(y(t) + 4)}' text-anchor='end' {FONT}>{escape(fmt(t))}</text>")
    for i in range(n):
        if n <= 20 or i % math.ceil(n / 20) == 0:
            body.append(f"<text x='{_num(x(i))}' y='{top + ph + 14}' text-anchor='middle' {FONT}>{i + 1}</text>")
    body.append(f"<text x='{left + pw / 2}' y='{height - 2}' text-anchor='middle' {FONT}>step</text>"
                f"<text x='12' y='{top + ph / 2}' transform='rotate(-90 12 {top + ph / 2})' text-anchor='middle' "
                f"{FONT}>{escape(unit + (', log scale' if log else ''))}</text>")
    for k, (name, values) in enumerate(series):
        color = colors[k % len(colors)]
        pts = " ".join(f"{_num(x(i))},{_num(y(v))}" for i, v in enumerate(values))
        body.append(f"<polyline points='{pts}' fill='none' stroke='{color}' stroke-width='1.8'/>")
        for i, v in enumerate(values):
            body.append(f"<circle cx='{_num(x(i))}' cy='{_num(y(v))}' r='3' fill='{color}'>"
                        f"<title>{escape(name)} step {i + 1}: {escape(fmt(v, unit))}</title></circle>")
        med = statistics.median(values)
        body.append(f"<line x1='{left}' x2='{left + pw}' y1='{_num(y(med))}' y2='{_num(y(med))}' stroke='{color}' "
                    f"stroke-dasharray='4 3' stroke-width='1'/>")
        ly = top + 14 + 30 * k
        body.append(f"<rect x='{left + pw + 10}' y='{ly - 9}' width='10' height='10' fill='{color}'/>"
                    f"<text x='{left + pw + 24}' y='{ly}' {FONT}>{escape(name[:18])}</text>"
                    f"<text x='{left + pw + 24}' y='{ly + 13}' {FONT} fill='#555'>median "
                    f"{escape(fmt(med, unit))}</text>")
    return _svg(width, height, "".join(body), label, "chart steps")


def lanes(timeline: dict, *, width: int = 900, lane_h: int = 34, label: str = "GPU busy/idle per stream") -> str:
    """A row per (device, stream): each slice's bar is as high as the share of it the stream was busy;
    hatched grey where the slice lies outside the analysed steps."""
    rows = timeline.get("lanes") or []
    bins = int(timeline.get("bins") or 0)
    left, right, top = 210, 10, 6
    pw = width - left - right
    height = top + lane_h * (len(rows) + 1) + 26
    if not rows or bins <= 0:
        return _svg(width, 40, f"<text x='8' y='24' {FONT}>no GPU work in the analysed steps</text>", label,
                    "chart lanes")
    span_ms = float(timeline.get("span_us", 0.0)) / 1e3
    t0_ms = float(timeline.get("t0_us", 0.0)) / 1e3
    bw = pw / bins
    hatch = f"outside-{next(_IDS)}"  # ids are page-wide: one per chart
    body = [(f"<defs><pattern id='{hatch}' width='6' height='6' patternUnits='userSpaceOnUse' "
             "patternTransform='rotate(45)'><rect width='6' height='6' fill='#f2f2f2'/>"
             "<line x1='0' y1='0' x2='0' y2='6' stroke='#d0d0d0' stroke-width='2'/></pattern></defs>")]
    inside = timeline.get("in_window") or [1.0] * bins
    for r, lane in enumerate(rows):
        y = top + r * lane_h
        color = TYPE_COLORS.get(lane.get("top_type", "other"), "#2471a3")
        name = f"GPU {lane['device']} · stream {lane['stream']}"
        body.append(f"<text x='{left - 6}' y='{y + lane_h * 0.45}' text-anchor='end' {FONT}>{escape(name)}</text>"
                    f"<text x='{left - 6}' y='{y + lane_h * 0.45 + 12}' text-anchor='end' {FONT} font-size='10' "
                    f"fill='#666'>{escape(fmt(lane.get('busy_pct', 0.0)))} % busy · mostly "
                    f"{escape(lane.get('top_type', ''))}</text>")
        body.append(f"<rect x='{left}' y='{y + 2}' width='{pw}' height='{lane_h - 4}' fill='#fff' stroke='#ddd'/>")
        for i, b in enumerate(lane.get("busy") or []):
            xi = left + i * bw
            if i < len(inside) and inside[i] < 0.5:
                body.append(f"<rect x='{_num(xi)}' y='{y + 2}' width='{_num(bw + 0.3)}' height='{lane_h - 4}' "
                            f"fill='url(#{hatch})'/>")
            if b <= 0:
                continue
            t = t0_ms + span_ms * i / bins
            h = max((lane_h - 4) * min(float(b), 1.0), 1.0)
            body.append(f"<rect x='{_num(xi)}' y='{_num(y + lane_h - 2 - h)}' width='{_num(bw + 0.3)}' "
                        f"height='{_num(h)}' fill='{color}'>"
                        f"<title>{escape(name)} @ {t:.3f} ms: busy {100 * b:.0f} %</title></rect>")
    axis_y = top + len(rows) * lane_h + 4
    for t in nice_ticks(t0_ms, t0_ms + span_ms, 8):
        xt = left + pw * (t - t0_ms) / span_ms if span_ms else left
        body.append(f"<line x1='{_num(xt)}' x2='{_num(xt)}' y1='{axis_y}' y2='{axis_y + 4}' stroke='#888'/>"
                    f"<text x='{_num(xt)}' y='{axis_y + 15}' text-anchor='middle' {FONT}>{escape(fmt(t))}</text>")
    body.append(f"<text x='{left + pw}' y='{axis_y + 28}' text-anchor='end' {FONT} fill='#555'>ms since the trace "
                f"started · bar height: busy share of each {escape(fmt(span_ms * 1e3 / bins, 'µs'))} slice · "
                "hatched: outside the analysed steps</text>")
    return _svg(width, height + 8, "".join(body), label, "chart lanes")


def hbars(items: Sequence[tuple[str, float]], *, unit: str = "", width: int = 680, colors: dict | None = None,
          label: str = "bars", bar_h: int = 20) -> str:
    """Horizontal bars, one per (label, value), longest scale = the largest value."""
    items = [(name, float(v)) for name, v in items]
    left, right = 150, 90
    pw = width - left - right
    height = max(bar_h * len(items) + 8, 30)
    hi = max([v for _, v in items] + [1e-12])
    body = []
    for i, (name, v) in enumerate(items):
        y = 4 + i * bar_h
        color = (TYPE_COLORS if colors is None else colors).get(name, PALETTE[i % len(PALETTE)])
        w = pw * max(v, 0.0) / hi
        body.append(f"<text x='{left - 6}' y='{y + bar_h * 0.65}' text-anchor='end' {FONT}>{escape(name[:24])}</text>"
                    f"<rect x='{left}' y='{y + 2}' width='{_num(w)}' height='{bar_h - 5}' fill='{color}'>"
                    f"<title>{escape(name)}: {escape(fmt(v, unit))}</title></rect>"
                    f"<text x='{_num(left + w + 4)}' y='{y + bar_h * 0.65}' {FONT}>{escape(fmt(v, unit))}</text>")
    return _svg(width, height, "".join(body), label, "chart bars")


def paired_hbars(items: Sequence[tuple[str, float, float]], *, unit: str = "", width: int = 680,
                 names: tuple[str, str] = ("before", "after"), label: str = "before and after") -> str:
    """Two bars per label (before above after) on one scale."""
    left, right, group_h = 150, 90, 30
    pw = width - left - right
    height = group_h * len(items) + 26
    hi = max([max(b, a) for _, b, a in items] + [1e-12])
    colors = (PALETTE[1], PALETTE[0])
    body = []
    for i, (name, before, after) in enumerate(items):
        y = 4 + i * group_h
        body.append(f"<text x='{left - 6}' y='{y + group_h * 0.5}' text-anchor='end' {FONT}>{escape(name[:24])}</text>")
        for j, v in enumerate((before, after)):
            w = pw * max(v, 0.0) / hi
            yy = y + j * 12
            body.append(f"<rect x='{left}' y='{yy + 2}' width='{_num(w)}' height='10' fill='{colors[j]}'>"
                        f"<title>{escape(name)} {names[j]}: {escape(fmt(v, unit))}</title></rect>"
                        f"<text x='{_num(left + w + 4)}' y='{yy + 11}' {FONT} font-size='10'>"
                        f"{escape(fmt(v, unit))}</text>")
    ly = height - 12
    for j, n in enumerate(names):
        body.append(f"<rect x='{left + j * 90}' y='{ly - 8}' width='10' height='10' fill='{colors[j]}'/>"
                    f"<text x='{left + j * 90 + 14}' y='{ly + 1}' {FONT}>{escape(n)}</text>")
    return _svg(width, height, "".join(body), label, "chart bars")


def xy_lines(x: Sequence[float], series: Sequence[tuple[str, Sequence[float]]], *, x_unit: str = "",
             y_unit: str = "", width: int = 680, height: int = 220, label: str = "series") -> str:
    """Lines of several series over one numeric x axis (e.g. memory over time)."""
    xs = [float(v) for v in x]
    series = [(n, [float(v) for v in vs]) for n, vs in series if len(vs) == len(xs)]
    if len(xs) < 2 or not series:
        return _svg(width, 40, f"<text x='8' y='24' {FONT}>too few points to draw</text>", label, "chart xy")
    left, right, top, bottom = 64, 150, 12, 30
    pw, ph = width - left - right, height - top - bottom
    x_lo, x_hi = min(xs), max(xs)
    x_hi = x_hi if x_hi > x_lo else x_lo + 1
    y_hi = max(max(v) for _, v in series) * 1.05 or 1.0
    ticks = nice_ticks(0.0, y_hi)
    y_hi = max(y_hi, ticks[-1])

    def px(v: float) -> float:
        return left + pw * (v - x_lo) / (x_hi - x_lo)

    def py(v: float) -> float:
        return top + ph - ph * v / y_hi

    body = [f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='#fafafa' stroke='#ddd'/>"]
    for t in ticks:
        body.append(f"<text x='{left - 4}' y='{_num(py(t) + 4)}' text-anchor='end' {FONT}>{escape(fmt(t))}</text>")
    for t in nice_ticks(x_lo, x_hi, 6):
        body.append(f"<text x='{_num(px(t))}' y='{top + ph + 14}' text-anchor='middle' {FONT}>{escape(fmt(t))}</text>")
    body.append(f"<text x='{left + pw / 2}' y='{height - 2}' text-anchor='middle' {FONT}>{escape(x_unit)}</text>"
                f"<text x='12' y='{top + ph / 2}' transform='rotate(-90 12 {top + ph / 2})' text-anchor='middle' "
                f"{FONT}>{escape(y_unit)}</text>")
    for k, (name, vs) in enumerate(series):
        color = PALETTE[k % len(PALETTE)]
        pts = " ".join(f"{_num(px(a))},{_num(py(b))}" for a, b in zip(xs, vs))
        body.append(f"<polyline points='{pts}' fill='none' stroke='{color}' stroke-width='1.6'><title>{escape(name)}"
                    f"</title></polyline><rect x='{left + pw + 10}' y='{top + 5 + 16 * k}' width='10' height='10' "
                    f"fill='{color}'/><text x='{left + pw + 24}' y='{top + 14 + 16 * k}' {FONT}>"
                    f"{escape(name[:20])}</text>")
    return _svg(width, height, "".join(body), label, "chart xy")


def roofline(points: Sequence[tuple[str, float, float, float]], dram_bps: float, roofs: Sequence[tuple[str, float]], *,
             width: int = 680, height: int = 300, label: str = "ops on the roofline") -> str:
    """Log-log roofline: each (name, FLOP/byte, achieved FLOP/s, time share 0..1) as a dot sized by its share,
    under the DRAM slope and one flat roof per (name, FLOP/s)."""
    pts = [(n, x, y, s) for n, x, y, s in points if x > 0 and y > 0]
    if not pts or dram_bps <= 0 or not roofs:
        return _svg(width, 40, f"<text x='8' y='24' {FONT}>no op with FLOPs and bytes to place</text>", label, "chart roof")
    left, right, top, bottom = 64, 130, 12, 32
    pw, ph = width - left - right, height - top - bottom
    top_roof = max(v for _, v in roofs)
    x_lo = 10 ** math.floor(math.log10(min(x for _, x, _, _ in pts) / 2))
    x_hi = 10 ** math.ceil(math.log10(max(max(x for _, x, _, _ in pts) * 2, 2 * top_roof / dram_bps)))
    y_hi = 10 ** math.ceil(math.log10(top_roof * 1.5))
    y_lo = 10 ** math.floor(math.log10(min(min(y for _, _, y, _ in pts) / 2, dram_bps * x_lo)))

    def px(v: float) -> float:
        return left + pw * (math.log10(v) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))

    def py(v: float) -> float:
        v = min(max(v, y_lo), y_hi)
        return top + ph - ph * (math.log10(v) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo))

    body = [f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='#fafafa' stroke='#ddd'/>"]
    for e in range(int(math.log10(y_lo)), int(math.log10(y_hi)) + 1, 2):
        body.append(f"<text x='{left - 4}' y='{_num(py(10 ** e) + 4)}' text-anchor='end' {FONT}>"
                    f"{escape(fmt(10 ** e / 1e12, 'T'))}</text>")
    for e in range(int(math.log10(x_lo)), int(math.log10(x_hi)) + 1):
        body.append(f"<text x='{_num(px(10 ** e))}' y='{top + ph + 14}' text-anchor='middle' {FONT}>"
                    f"{escape(fmt(10 ** e))}</text>")
    body.append(f"<text x='{left + pw / 2}' y='{height - 2}' text-anchor='middle' {FONT}>FLOP per byte</text>"
                f"<text x='12' y='{top + ph / 2}' transform='rotate(-90 12 {top + ph / 2})' text-anchor='middle' "
                f"{FONT}>FLOP/s</text>")
    for k, (name, flops) in enumerate(sorted(roofs, key=lambda r: -r[1])):
        ridge = flops / dram_bps
        body.append(f"<polyline points='{_num(px(x_lo))},{_num(py(dram_bps * x_lo))} {_num(px(ridge))},{_num(py(flops))} "
                    f"{_num(px(x_hi))},{_num(py(flops))}' fill='none' stroke='#555' stroke-dasharray='{0 if k == 0 else 4}'>"
                    f"<title>{escape(name)}: {escape(fmt(flops / 1e12, 'TFLOP/s'))}</title></polyline>"
                    f"<text x='{left + pw + 4}' y='{_num(py(flops) + 4)}' {FONT}>{escape(name[:18])}</text>")
    for i, (name, x, y, share) in enumerate(pts):
        r = 3 + 9 * math.sqrt(max(share, 0.0))
        body.append(f"<circle cx='{_num(px(x))}' cy='{_num(py(y))}' r='{_num(r)}' fill='{PALETTE[i % len(PALETTE)]}' "
                    f"fill-opacity='0.7'><title>{escape(name)}: {escape(fmt(x))} FLOP/B, "
                    f"{escape(fmt(y / 1e12, 'TFLOP/s'))}, {escape(fmt(100 * share, '%'))} of the modelled time"
                    "</title></circle>")
    return _svg(width, height, "".join(body), label, "chart roof")
