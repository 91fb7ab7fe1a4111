"""Rendering a before/after Diff (perflab.analysis.reports.compare): a rich table, JSON (perflab.diff/1), a plot."""
from __future__ import annotations

from pathlib import Path

import orjson
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from perflab.analysis.reports.compare import Delta, Diff
from perflab.errors import PerflabError
from perflab.report.console import safe_console
from perflab.report.json import clean_json
from perflab.report.summary import fmt_num, short

METRIC_LABELS = {
    "step_time_ms": "step time (median, profiled)",
    "step_spread_pct": "step spread (IQR / median)",
    "gpu_busy_pct": "GPU busy",
    "gpu_time_per_step_us": "GPU time per step",
    "kernels_per_step": "kernels per step",
    "mean_kernel_us": "mean kernel time",
    "syncs_per_step": "host syncs per step",
    "itl_p50_ms": "per-token latency p50 (serving)",
    "itl_p90_ms": "per-token latency p90 (serving)",
    "itl_p99_ms": "per-token latency p99 (serving)",
    "iteration_p50_ms": "iteration time p50 (serving)",
    "tokens_per_iteration": "tokens per iteration (serving)",
    "tokens_per_s": "tokens per second (serving)",
}
STATUS_STYLE = {"appeared": "bold red", "worse": "red", "disappeared": "green", "better": "green", "unchanged": "dim"}


def diff_json(diff: Diff, *, indent: bool = True) -> str:
    """One JSON object, schema perflab.diff/1; NaN/inf become null."""
    return orjson.dumps(clean_json(diff.to_dict()), option=orjson.OPT_INDENT_2 if indent else 0).decode()


def change_text(d: Delta) -> Text:
    """`-94.5 % (18.2× less)` coloured by whether the change is good."""
    if d.change == 0:
        return Text("=", style="dim")
    style = "green" if d.better else "red"
    bits = []
    if d.change_pct is not None:
        bits.append(f"{d.change_pct:+.1f} %")
    else:
        bits.append(f"{d.change:+,.3g}")
    r = d.ratio
    if r and r > 0 and (r >= 1.5 or r <= 1 / 1.5):
        bits.append(f"({fmt_num(r)}×)" if r >= 1 else f"({fmt_num(1 / r)}× less)")
    return Text(" ".join(bits), style=style)


def _unit(value: float, unit: str) -> str:
    return f"{fmt_num(value)} {unit}".rstrip()


def metrics_table(diff: Diff) -> Table:
    t = Table(title="step", title_justify="left", show_edge=False)
    for col, just in (("", "left"), ("before", "right"), ("after", "right"), ("change", "right")):
        t.add_column(col, justify=just)
    for m in diff.metrics:
        t.add_row(METRIC_LABELS.get(m.name, m.name), _unit(m.before, m.unit), _unit(m.after, m.unit), change_text(m))
    return t


def categories_table(diff: Diff) -> Table:
    t = Table(title="GPU time per step by kernel type", title_justify="left", show_edge=False)
    for col, just in (("type", "left"), ("before µs", "right"), ("after µs", "right"), ("change", "right")):
        t.add_column(col, justify=just)
    for c in sorted(diff.categories, key=lambda c: -max(c.before, c.after)):
        t.add_row(c.name, fmt_num(c.before), fmt_num(c.after), change_text(c))
    return t


def kernels_table(diff: Diff, limit: int = 8, name_width: int = 60) -> Table | None:
    if not diff.kernels:
        return None
    t = Table(title="kernels whose time per step changed most", title_justify="left", show_edge=False)
    t.add_column("kernel", no_wrap=True, overflow="ellipsis", max_width=name_width)
    for col, just in (("type", "left"), ("before µs", "right"), ("after µs", "right"), ("launches/step", "right")):
        t.add_column(col, justify=just, no_wrap=True, min_width=len(col))
    for k in diff.kernels[:limit]:
        t.add_row(short(k.name, name_width), k.type, fmt_num(k.before_us), fmt_num(k.after_us),
                  f"{fmt_num(k.before_count)} → {fmt_num(k.after_count)}")
    return t


def findings_table(diff: Diff) -> Table | None:
    if not diff.findings:
        return None
    t = Table(title="findings", title_justify="left", show_edge=False)
    for col in ("finding", "status", "before", "after"):
        t.add_column(col)

    def cell(sev: str | None, gain: float | None) -> str:
        return "-" if sev is None else f"{sev} ({gain:.0f} %)" if gain else sev

    for f in diff.findings:
        t.add_row(f.id, Text(f.status, style=STATUS_STYLE.get(f.status, "")),
                  cell(f.before_severity, f.before_gain_pct), cell(f.after_severity, f.after_gain_pct))
    return t


def render_diff(diff: Diff, console: Console | None = None) -> None:
    console = console or safe_console()
    parts: list[RenderableType] = [
        Text(f"before: {diff.before.label}  [{diff.before.device}]", style="dim"),
        Text(f"after:  {diff.after.label}  [{diff.after.device}]", style="dim"),
        Text(diff.verdict, style="bold"),
        metrics_table(diff), categories_table(diff),
    ]
    kernels = kernels_table(diff, name_width=max(16, min(60, console.width - 62)))
    parts += [p for p in (kernels, findings_table(diff)) if p is not None]
    parts += [Text(p.verdict, style="green" if "as promised" in p.verdict or "inside" in p.verdict else "")
              for p in diff.promises]
    parts += [Text(f"note: {n}", style="yellow") for n in diff.notes]
    console.print(Group(*parts))


# ---- the plot (matplotlib, lazily) ------------------------------------------------------------------

def check_plot_path(out: str | Path) -> Path:
    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise PerflabError(f"{out}: the diff plot is written as .png, .svg or .pdf")
    return out


def save_diff_plot(diff: Diff, out: str | Path, *, force: bool = False, inputs=()) -> Path:
    """Step times per step, GPU time per step by kernel type, and the kernels that changed most."""
    from perflab.report.plotting import pyplot, save_figure

    out = check_plot_path(out)
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 5), dpi=110)
    colors = {"before": "#c0392b", "after": "#2471a3"}
    ax = axes[0]
    for key, side in (("before", diff.before), ("after", diff.after)):
        times = side.step.times_ms
        ax.plot(range(1, len(times) + 1), times, marker="o", color=colors[key],
                label=f"{key}: median {side.step.median_ms:.3g} ms")
        ax.axhline(side.step.median_ms, color=colors[key], lw=0.8, ls="--")
    ax.set_xlabel("step")
    ax.set_ylabel("step time (ms)")
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
    ax.set_title("step time")
    ax.legend(fontsize=8)
    ax = axes[1]
    cats = sorted(diff.categories, key=lambda c: -max(c.before, c.after))
    y = range(len(cats))
    ax.barh([i + 0.2 for i in y], [c.before / 1e3 for c in cats], height=0.4, color=colors["before"], label="before")
    ax.barh([i - 0.2 for i in y], [c.after / 1e3 for c in cats], height=0.4, color=colors["after"], label="after")
    ax.set_yticks(list(y), [c.name for c in cats])
    ax.invert_yaxis()
    ax.set_xlabel("GPU time per step (ms)")
    ax.set_title("by kernel type")
    ax.legend(fontsize=8)
    ax = axes[2]
    ks = diff.kernels[:8]
    y = range(len(ks))
    ax.barh(list(y), [k.change_us / 1e3 for k in ks], color=[colors["after"] if k.change_us < 0 else colors["before"]
                                                            for k in ks])
    ax.set_yticks(list(y), [short(k.name, 38) for k in ks], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="black", lw=0.6)
    ax.set_xlabel("change in GPU time per step (ms)")
    ax.set_title("kernels that changed most")
    sp = diff.speedup
    speed = f"   ({sp:.2f}× per step)" if sp else ""
    fig.suptitle(f"{diff.before.label}  →  {diff.after.label}{speed}", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out, force=force, inputs=inputs)


# ---- kernel-level diff of two Nsight Compute reports (perflab.analysis.ncu.ncu_compare) -----------------

def ncu_diff_json(diff, *, indent: bool = True) -> str:
    """One JSON object, schema perflab.ncu-diff/1; NaN/inf become null."""
    return orjson.dumps(clean_json(diff.to_dict()), option=orjson.OPT_INDENT_2 if indent else 0).decode()


def ncu_pair_table(pair, limit: int = 16) -> Table:
    from perflab.analysis.ncu.ncu_compare import LABELS, rel_change

    paired = "" if pair.paired_by == "name" else "  (paired by position)"
    t = Table(title=f"{pair.name}{paired}: metrics by how far they moved", title_justify="left", show_edge=False)
    for col, just in (("metric", "left"), ("before", "right"), ("after", "right"), ("change", "right")):
        t.add_column(col, justify=just, no_wrap=True)
    for m in pair.metrics[:limit]:
        change = change_text(m) if rel_change(m) > 0 else Text("=", style="dim")
        t.add_row(LABELS.get(m.name, m.name), _unit(m.before, m.unit), _unit(m.after, m.unit), change)
    return t


def ncu_findings_table(pair) -> Table | None:
    if not pair.findings:
        return None
    t = Table(title=f"{pair.name}: the doctor's findings", title_justify="left", show_edge=False)
    for col in ("finding", "status", "before", "after"):
        t.add_column(col)

    def cell(sev, gain) -> str:
        return "-" if sev is None else f"{sev} ({gain:.0f} %)" if gain else sev

    for f in pair.findings:
        t.add_row(f.id, Text(f.status, style=STATUS_STYLE.get(f.status, "")),
                  cell(f.before_severity, f.before_gain_pct), cell(f.after_severity, f.after_gain_pct))
    return t


def render_ncu_diff(diff, console: Console | None = None) -> None:
    console = console or safe_console()
    parts: list[RenderableType] = [
        Text(f"before: {diff.before_label}  [{diff.before_device}]", style="dim"),
        Text(f"after:  {diff.after_label}  [{diff.after_device}]", style="dim"),
        Text(diff.verdict, style="bold"),
    ]
    for pair in diff.pairs:
        parts.append(ncu_pair_table(pair))
        ft = ncu_findings_table(pair)
        if ft is not None:
            parts.append(ft)
        parts += [Text(f"  - {r}") for r in pair.readings]
    if diff.only_before:
        parts.append(Text(f"only in before: {', '.join(diff.only_before)}", style="yellow"))
    if diff.only_after:
        parts.append(Text(f"only in after: {', '.join(diff.only_after)}", style="yellow"))
    parts += [Text(f"note: {n}", style="yellow") for n in diff.notes]
    console.print(Group(*parts))
