"""The merged investigation report in the terminal (and as JSON): the headline, then each level top-down with its
finding, its gain, the evidence and the commands that reproduce it."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perflab.report import svg
from perflab.report.console import safe_console

_STATUS = {"done": "green", "partial": "yellow", "failed": "bold red", "timed-out": "bold red", "skipped": "yellow",
           "not-needed": "dim", "missing": "dim", "not-run": "yellow"}
_SEV = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "green"}


def investigation_json(inv: Any) -> str:
    from perflab.report.json import clean_json

    import orjson

    return orjson.dumps(clean_json(inv.to_dict()), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode()


def _gain(f: dict | None) -> str:
    if not f:
        return ""
    return f"{f['severity']} · gain ~{f['gain_pct']:.1f} {f.get('gain_unit', '%')}"


def _kv(d: dict, limit: int = 8) -> str:
    parts = []
    for k, v in d.items():
        if isinstance(v, (dict, list)) or v is None:
            continue
        parts.append(f"{k}={svg.fmt(v) if isinstance(v, float) else v}")
        if len(parts) == limit:
            break
    return ", ".join(parts)


def render_investigation(inv: Any, console: Console | None = None) -> None:
    console = console or safe_console(highlight=False, soft_wrap=True)
    d = inv.to_dict()
    prog = " ".join(d["program"]) if d.get("program") else "(program not recorded: evidence gathered by hand)"
    took = f"; {d['wall_s']:.1f} s" if d.get("wall_s") else ""
    console.print(Text(f"investigation of {prog}  [{d['folder']}; {d.get('device') or 'device unknown'}{took}]",
                       style="dim"))
    h = d["headline"]
    where = {"healthy": "nothing big to fix", "incomplete": "not judged yet"}.get(
        h["scope"], f"act first on the {h['scope']} (level {h['level']})")
    console.print(Text(f"▶ {where}: ", style="bold") + Text(h["text"], style="bold"))
    for lv in d["levels"]:
        _level(console, lv)
    for f in d.get("files_not_read") or []:
        console.print(Text(f"not read: {f['file']}: {f['why']}", style="dim"))


def _head(console: Console, lv: dict) -> None:
    took = f" · {lv['took_s']:.1f} s" if lv.get("took_s") else ""
    console.rule(Text(f"level {lv['level']} · {lv['name']} · {lv['tool']}", style="bold"), align="left")
    console.print(Text(f"[{lv['status']}{took}] ", style=_STATUS.get(lv["status"], "")) + Text(lv["top_line"] or ""))


def _commands(console: Console, commands: dict | None) -> None:
    for what, cmd in (commands or {}).items():
        console.print(Text(f"  {what} by hand: ", style="dim") + Text(cmd))


def _level(console: Console, lv: dict) -> None:
    _head(console, lv)
    if lv["level"] == 2:
        _kernels(console, lv)
    else:
        f = lv.get("finding")
        if f:
            console.print(Text(f"  finding: {f['id']} ", style="bold") + Text(_gain(f), style=_SEV.get(f["severity"], "")))
            if f.get("fix"):
                console.print(Text("  fix: " + f["fix"]))
        if lv.get("evidence"):
            console.print(Text("  evidence: " + _kv(lv["evidence"]), style="dim"))
        if lv["level"] == 1 and lv.get("families"):
            _families(console, lv)
        if lv["level"] == 3 and lv.get("reasons") and lv["status"] == "done":
            console.print(Text("  why this level: " + "; ".join(lv["reasons"]), style="dim"))
    for note in lv.get("notes") or []:
        console.print(Text("  note: " + note, style="yellow"))
    if lv.get("status") in ("failed", "timed-out") and lv.get("output_tail"):
        last = [ln for ln in lv["output_tail"].splitlines() if ln.strip()][-3:]
        for ln in last:
            console.print(Text("  | " + ln, style="dim"))
    _commands(console, lv.get("commands"))


def _families(console: Console, lv: dict) -> None:
    if lv.get("sol_sentence"):
        console.print(Text("  speed of light: " + lv["sol_sentence"], style="dim"))
    table = Table(show_header=True, header_style="bold", expand=False, box=None, padding=(0, 2))
    for col in ("  op family", "µs/step", "at speed of light", "gap % of step", "% of roof"):
        table.add_column(col, justify="left" if "family" in col else "right")
    for f in lv["families"]:
        table.add_row("  " + f["family"], svg.fmt(f["time_us"]), svg.fmt(f["sol_us"]),
                      svg.fmt(f.get("gap_pct_of_step"), "%"), svg.fmt(f.get("pct_of_roof"), "%"))
    console.print(table)


def _kernels(console: Console, lv: dict) -> None:
    if lv.get("why") and lv["why"] != lv.get("top_line"):
        console.print(Text("  chosen by the time they would save: " + lv["why"], style="dim"))
    for k in lv.get("kernels") or []:
        roof = f"{k['pct_of_roof']:.0f} % of its roof" if k.get("pct_of_roof") is not None else "no speed of light"
        console.print(Text(f"  #{k['rank']} {k['function']} ", style="bold") + Text(
            f"[{k['status']}] {k['time_us']:,.1f} µs/step, {roof}; would save {k['gain_us']:,.1f} µs/step = "
            f"{k['gain_pct']:.1f} % of the step (by its {k['basis']})"))
        console.print(Text(f"     {k['kernel'][:150]}", style="dim"))
        p = k["plan"]
        console.print(Text(f"     launch: ProfilerStep#{p['step']}, grid {p['grid']}, block {p['block']}; ncu "
                           f"--launch-skip {p['skip']} --launch-count {p['count']} ({p['steps_before']} steps before "
                           f"the trace x {p['per_step']:g} + {p['index_in_steps']} in it"
                           f"{'' if p['exact'] else ', estimated'})", style="dim"))
        prof = k.get("profiled")
        if prof:
            same = "the chosen launch" if prof["matches_chosen"] else "NOT the chosen launch"
            console.print(Text(f"     ncu profiled {prof['launches']} launch(es); read #{prof['index']}: {same} "
                               f"(grid {prof['grid']}, block {prof['block']}, {svg.fmt(prof['duration_us'])} µs under "
                               f"ncu vs {svg.fmt(k['chosen_launch']['duration_us'])} µs in the trace)", style="dim"))
            if prof.get("note"):
                console.print(Text("     note: " + prof["note"], style="yellow"))
        f = k.get("finding")
        if f:
            console.print(Text(f"     ncu: {f['id']} ", style="bold") + Text(_gain(f), style=_SEV.get(f["severity"], ""))
                          + Text(" — " + f["summary"]))
            if f.get("fix"):
                console.print(Text("     fix: " + f["fix"][:400]))
        elif k.get("verdict"):
            console.print(Text("     " + k["verdict"], style="yellow" if k["status"] != "done" else ""))
        for note in p.get("notes") or []:
            console.print(Text("     plan: " + note, style="dim"))
        for what, cmd in (k.get("commands") or {}).items():
            console.print(Text(f"     {what} by hand: ", style="dim") + Text(cmd))
    for o in lv.get("other_reports") or []:
        console.print(Text(f"  report {o['report_file']}: ", style="bold") + Text(o["verdict"]))
