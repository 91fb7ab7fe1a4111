"""The HTML report: one self-contained file (inline CSS, SVG and PNG; nothing fetched from anywhere).

`report_html(report)` renders the doctor's Report: verdict, findings with evidence and fix, the step
times and a busy/idle timeline per stream (drawn from the report's analyses), the kernel breakdown,
the roofline for an Nsight Compute report and the memory timeline for a memory snapshot.
`diff_html(diff, before, after)` renders a before/after Diff; the CLI writes them with
perflab.outputs.write_output. Templates live in perflab/report/templates/ (jinja2).
"""
from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.report import svg
from perflab.report.sol_view import sol_context

TEMPLATES = Path(__file__).with_name("templates")
SEVERITY_CLASS = {"high": "sev-high", "medium": "sev-medium", "low": "sev-low", "info": "sev-info"}
X_KEYS = ("t_ms", "ts_ms", "time_ms", "t_us", "ts_us", "time_us", "t_s", "time_s", "ts", "t", "time", "event",
          "index", "i")


# ---- jinja ------------------------------------------------------------------------------------------

def _env():
    try:
        import jinja2
    except ImportError:
        raise PerflabError("the HTML report needs jinja2: pip install jinja2") from None
    from markupsafe import Markup

    from perflab.report.console import clean

    def finalize(value: Any) -> Any:  # text from a file is data: no control characters in the page either
        if isinstance(value, Markup):
            return Markup(clean(str(value)))
        return clean(value) if isinstance(value, str) else value

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True, finalize=finalize,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = lambda v, unit="": (svg.fmt(v, unit) if isinstance(v, (int, float))
                                             else "-" if v is None else v)
    env.globals["svg"] = lambda text: Markup(text)  # our own SVG, built with every label escaped
    return env


def _render(template: str, **context: Any) -> str:
    from perflab import __version__ as version

    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return _env().get_template(template).render(version=version, generated=generated, **context)


# ---- the doctor's report -------------------------------------------------------------------------------

def _value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, float)):
        return svg.fmt(v) if isinstance(v, float) else f"{v:,}"
    if isinstance(v, (dict, list, tuple)):
        text = json.dumps(v, default=str)
        return text if len(text) <= 400 else text[:399] + "…"
    return str(v)


def finding_view(f: Any) -> dict[str, Any]:
    return {"id": f.id, "level": f.level, "severity": f.severity, "cls": SEVERITY_CLASS.get(f.severity, ""),
            "gain_pct": f.gain_pct, "summary": f.summary, "fix": f.fix,
            "evidence": [(k, _value(v)) for k, v in f.evidence.items()],
            "events": [{"name": e.name, "ts_ms": e.ts_us / 1e3, "dur_us": e.dur_us} for e in f.events[:8]]}


def _stats(summary: dict[str, Any], split: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    if not summary:
        return []
    if split:  # a CPU-only trace: where the step thread's time goes
        return [("step time (median)", svg.fmt(summary.get("step_time_ms", float("nan")), "ms")),
                ("profiled steps", str(summary.get("steps", "-")))] + \
               [(f"step thread: {k}", svg.fmt(split["pct"].get(k, 0.0), "%")) for k in ("ops", "comm", "dataloader", "python")]
    syncs = summary.get("syncs") or {}
    return [("step time (median)", svg.fmt(summary.get("step_time_ms", float("nan")), "ms")),
            ("GPU busy", svg.fmt(summary.get("gpu_busy_pct", float("nan")), "%")),
            ("profiled steps", str(summary.get("steps", "-"))),
            ("kernels per step", svg.fmt(summary.get("kernels_per_step", float("nan")))),
            ("mean kernel time", svg.fmt(summary.get("mean_kernel_us", float("nan")), "µs")),
            ("host syncs per step", svg.fmt(syncs.get("per_step", float("nan"))))]


def _kineto_charts(report: Any) -> dict[str, Any]:
    a = report.analyses or {}
    timeline = a.get("timeline") or {}
    steps = timeline.get("step_ms") or [s["dur_us"] / 1e3 for s in (a.get("busy") or {}).get("steps", [])]
    kernels = a.get("kernels") or {}
    n = max(len(report.source.get("window", {}).get("steps", [])), 1)
    by_type = sorted(((t, v["total_us"] / n) for t, v in (kernels.get("by_type") or {}).items()), key=lambda kv: -kv[1])
    idle = {k: v for k, v in ((a.get("idle") or {}).get("by_cause_pct") or {}).items() if (v or 0) > 0}
    return {
        "steps_svg": svg.step_series([("step time", steps)]) if steps else "",
        "lanes_svg": svg.lanes(timeline) if timeline else "",
        "types_svg": svg.hbars(by_type, unit="µs", label="GPU time per step by kernel type") if by_type else "",
        "idle_svg": svg.hbars(sorted(idle.items(), key=lambda kv: -kv[1]), unit="%", colors={},
                              label="GPU idle time by cause") if idle else "",
        "top_kernels": [{"name": k["name"], "type": k["type"], "count": k["count"], "total_us": k["total_us"],
                         "mean_us": k["mean_us"], "pct": k["pct"]} for k in kernels.get("by_name") or []],
        "streams": len(timeline.get("lanes") or []),
        "sol": sol_context(a.get("speed_of_light")),
    }


def _ncu_section(report: Any) -> dict[str, Any] | None:
    if report.source.get("kind") != "ncu":
        return None
    from perflab.report.ncu_view import by_time, limit_cells, rule_line

    kernels = [k for k in (report.analyses or {}).get("kernels") or [] if isinstance(k, dict)]
    ordered = by_time(kernels)
    section: dict[str, Any] = {"kernels": kernels, "ceilings": (report.analyses or {}).get("ceilings", ""),
                               "png": None, "note": "", "limits": [limit_cells(k) for k in ordered],
                               "rules_note": (report.analyses or {}).get("ncu_rules_note", ""),
                               "rules": [{"kernel": k.get("name", ""), "status": k["ncu_rules"].get("status", ""),
                                          "note": k["ncu_rules"].get("note", ""),
                                          "lines": [(rule_line(r), r.get("message", "")) for r in k["ncu_rules"].get("rules", [])]}
                                         for k in ordered if k.get("ncu_rules")]}
    try:
        from perflab.analysis.work.roofline import roofline_for_report
        from perflab.report.roofline_plot import roofline_png

        png = roofline_png(roofline_for_report(report.source["path"]))
        section["png"] = base64.b64encode(png).decode()
    except PerflabError as exc:
        section["note"] = f"roofline not drawn: {exc}"
    except (OSError, KeyError, ValueError) as exc:
        section["note"] = f"roofline not drawn: {type(exc).__name__}: {exc}"
    return section


def _series_like(v: Any) -> bool:
    return (isinstance(v, list) and bool(v) and all(isinstance(r, dict) for r in v)
            or isinstance(v, dict) and any(isinstance(c, list) and c for c in v.values()))


def _find_series(value: Any, depth: int = 0) -> tuple[str, Any] | None:
    """The first analysis under a key that mentions `timeline` holding a series (rows or columns),
    itself or as its `series`."""
    if depth > 4 or not isinstance(value, dict):
        return None
    for k, v in value.items():
        if "timeline" in str(k).lower():
            if isinstance(v, dict) and _series_like(v.get("series")):
                return str(k), v["series"]
            if _series_like(v):
                return str(k), v
    for k, v in value.items():
        hit = _find_series(v, depth + 1) if k != "per_device" else None
        if hit:
            return hit
    return None


def memory_series(data: Any) -> tuple[list[float], list[tuple[str, list[float]]], str, str] | None:
    """(x, [(name, y)], x_unit, y_unit) from rows [{t, allocated, ...}] or columns {t: [...], allocated: [...]}."""
    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if isinstance(data, list):
        keys = [k for k in data[0] if all(number(r.get(k)) for r in data)]
        cols = {k: [float(r[k]) for r in data] for k in keys}
    elif isinstance(data, dict):
        cols = {k: [float(x) for x in v] for k, v in data.items()
                if isinstance(v, list) and v and all(number(x) for x in v)}
        if len({len(v) for v in cols.values()}) != 1:
            return None
    else:
        return None
    x_key = next((k for k in X_KEYS if k in cols), None)
    ys = {k: v for k, v in cols.items() if k != x_key}
    if not ys:
        return None
    xs = cols[x_key] if x_key else [float(i) for i in range(len(next(iter(ys.values()))))]
    y_unit = ""
    if all(k.endswith("_mb") for k in ys):
        y_unit = "MB"
    elif all(k.endswith(("_mib", "_MiB")) for k in ys):
        y_unit = "MiB"
    elif max(max(v) for v in ys.values()) >= 2**20:
        ys = {k: [x / 2**20 for x in v] for k, v in ys.items()}
        y_unit = "MiB"
    return xs, list(ys.items())[:6], x_key or "event", y_unit


def _flatten(value: dict, prefix: str = "", depth: int = 0) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for k, v in value.items():
        key = f"{prefix}{k}"
        if isinstance(v, (int, float, str, bool)) or v is None:
            out.append((key, _value(v)))
        elif isinstance(v, dict) and depth < 3 and k not in ("per_device", "series"):
            out += _flatten(v, key + ".", depth + 1)
    return out


def _tables(value: dict, prefix: str = "", depth: int = 0) -> list[dict[str, Any]]:
    """Lists of records (pools, allocation sites, ...) as small tables."""
    out: list[dict[str, Any]] = []
    for k, v in value.items():
        key = f"{prefix}{k}"
        if isinstance(v, list) and v and all(isinstance(r, dict) for r in v) and "timeline" not in key:
            cols = [c for c, x in v[0].items() if isinstance(x, (int, float, str, bool)) or x is None][:7]
            if cols:
                out.append({"name": key, "columns": cols,
                            "rows": [[_value(r.get(c)) for c in cols] for r in v[:15]], "more": max(len(v) - 15, 0)})
        elif isinstance(v, dict) and depth < 2 and k not in ("per_device", "timeline"):
            out += _tables(v, key + ".", depth + 1)
    return out


def _memory_section(report: Any) -> dict[str, Any] | None:
    """Rendered only when the report carries memory analyses (a memory snapshot's report)."""
    a = report.analyses or {}
    mem = a.get("memory") if isinstance(a.get("memory"), dict) else None
    if mem is None and report.source.get("kind") == "memory":
        mem = a
    if not mem:
        return None
    hit = _find_series(mem)
    chart = ""
    if hit:
        series = memory_series(hit[1])
        if series:
            xs, ys, x_unit, y_unit = series
            chart = svg.xy_lines(xs, ys, x_unit=x_unit, y_unit=y_unit, label=f"memory: {hit[0]}")
    return {"scalars": _flatten(mem)[:80], "tables": _tables(mem)[:8], "chart": chart,
            "series_name": hit[0] if hit else ""}


def report_context(report: Any) -> dict[str, Any]:
    from perflab.report.serving_view import serving_lines

    kind = report.source.get("kind", "")
    summary = (report.analyses or {}).get("summary") or {}
    return {"source": report.source, "kind": kind, "verdict": report.verdict,
            "findings": [finding_view(f) for f in report.findings], "stats": _stats(summary, (report.analyses or {}).get("cpu_time_split")),
            "kineto": _kineto_charts(report) if kind in ("kineto", "nsys") and report.analyses.get("summary") else None,
            "ncu": _ncu_section(report), "memory": _memory_section(report),
            "serving": serving_lines((report.analyses or {}).get("serving"))}


def report_html(report: Any, *, title: str | None = None) -> str:
    """The doctor's report as one self-contained HTML page."""
    name = Path(str(report.source.get("path", ""))).name or "profile"
    return _render("report.html.j2", title=title or f"perflab doctor — {name}", r=report_context(report))


# ---- before / after ------------------------------------------------------------------------------------

def diff_html(diff: Any, before: Any = None, after: Any = None, *, title: str | None = None) -> str:
    """A Diff (perflab.analysis.reports.compare) as one page; with the two Reports, their timelines and findings too."""
    from perflab.report.diff import METRIC_LABELS

    def change(d: Any) -> dict[str, Any]:
        return {"label": METRIC_LABELS.get(d.name, d.name), "before": svg.fmt(d.before, d.unit),
                "after": svg.fmt(d.after, d.unit), "pct": d.change_pct, "ratio": d.ratio, "change": d.change,
                "cls": "same" if d.better is None else ("good" if d.better else "bad")}

    cats = sorted(diff.categories, key=lambda c: -max(c.before, c.after))
    sides = []
    for label, side, report in (("before", diff.before, before), ("after", diff.after, after)):
        sides.append({"name": label, "side": side,
                      "r": report_context(report) if report is not None else None})
    return _render("diff.html.j2", title=title or "perflab diff", d=diff, verdict=diff.verdict,
                   metrics=[change(m) for m in diff.metrics], categories=[change(c) | {"name": c.name} for c in cats],
                   steps_svg=svg.step_series([("before", diff.before.step.times_ms),
                                              ("after", diff.after.step.times_ms)],
                                             colors=(svg.PALETTE[1], svg.PALETTE[0])),
                   types_svg=svg.paired_hbars([(c.name, c.before, c.after) for c in cats], unit="µs",
                                              label="GPU time per step by kernel type, before and after"),
                   kernels=diff.kernels, findings=diff.findings, sides=sides, notes=diff.notes)


# ---- an investigation (doctor/investigation.py) ------------------------------------------------------------

def investigation_html(inv: Any, *, title: str | None = None) -> str:
    """The merged, top-down report of an investigation as one page."""
    d = inv.to_dict()
    lead = d["levels"][d["headline"]["level"] - 1].get("finding") or {}
    return _render("investigation.html.j2", title=title or f"perflab investigation — {Path(d['folder']).name}", d=d,
                   head_cls=SEVERITY_CLASS.get(lead.get("severity", ""), ""))
