"""perflab CLI: the toolkit for your own code — `perflab profile -- CMD`, `perflab monitor -- CMD`."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, List, Optional

import typer

from perflab.report.console import safe_console

# Everything after the first argument of CMD belongs to CMD (so `--` is optional).
# Exit codes leave by SystemExit: perflab.__main__.main returns what SystemExit carries.
PASSTHROUGH = {"allow_interspersed_args": False}
CMD = typer.Argument(None, metavar="-- CMD", help="the command to run, e.g. -- python script.py ARGS")


# Typer keeps a docstring's line breaks, so the help is written as one paragraph per string.
PROFILE_HELP = (
    "Profile an unmodified script with torch.profiler, then show the doctor's verdict.\n\n"
    "Steps are found by themselves: entries of --marker's range, else top-level nn.Module calls "
    "(one forward = one step), else time slices. Works through torchrun (one trace per rank).\n\n"
    "Each run gets a new folder under ./perflab-work/profile/ and a place in the run history: "
    "`perflab diff run:2 run:1` compares the run before with the latest."
)


def register(app: typer.Typer) -> None:
    app.command("profile", context_settings=PASSTHROUGH, help=PROFILE_HELP)(profile)
    app.command("monitor", context_settings=PASSTHROUGH)(monitor)


def profile(
    cmd: Optional[List[str]] = CMD,
    steps: int = typer.Option(10, help="steps to record"),
    warmup: int = typer.Option(3, help="steps to run first, unrecorded"),
    out: Optional[Path] = typer.Option(None, help="folder for the trace(s) \\[default: a new folder under "
                                                  "./perflab-work/profile]"),
    stack: bool = typer.Option(False, "--stack", help="record Python call stacks"),
    memory: bool = typer.Option(False, "--memory", help="record tensor allocations"),
    marker: Optional[str] = typer.Option(None, metavar="NAME|REGEX",
                                         help="a step begins where a record_function/NVTX range of this name "
                                              "opens (or whose whole name the regular expression matches: "
                                              "'execute_context_.*' for a serving engine's iterations)"),
    target: Optional[str] = typer.Option(None, help="the script or module to profile when it is not "
                                                    "the first .py in CMD"),
    slice_s: float = typer.Option(0.1, "--slice", help="seconds per step when steps are time slices"),
    ncu: bool = typer.Option(False, "--ncu", help="hand over to `perflab ncu -- CMD` (Nsight Compute) instead"),
    html: Optional[Path] = typer.Option(None, "--html", help="also write the doctor's report as a self-contained "
                                                             "HTML file here"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing --html file, or the traces of an "
                                                      "earlier run in --out"),
) -> None:
    """Profile an unmodified script with torch.profiler, then show the doctor's verdict (help: PROFILE_HELP)."""
    from perflab.errors import PerflabError
    from perflab.outputs import check_folder, check_output, new_folder
    from perflab.toolkit import profile as lib

    if not cmd:
        raise PerflabError("give the command to profile, e.g. `perflab profile -- python script.py`")
    if html is not None:
        check_output(html, force=force, inputs=[a for a in cmd if Path(a).is_file()])  # before the run
    if ncu:
        raise SystemExit(subprocess.call([sys.executable, "-m", "perflab", "ncu", "--", *cmd]))
    found = lib.find_target(cmd, target)
    if out is not None:
        check_folder(out, force=force, holds=lib.TRACE_GLOBS)
    else:
        out = new_folder(lib.default_out())
    run = lib.profile_command(cmd, out=out, steps=steps, warmup=warmup, stack=stack, memory=memory,
                              marker=marker, target=found, slice_s=slice_s)
    for p in run.processes:
        if p.get("error"):
            print(f"perflab: profiling stopped early in process {p['pid']}: {p['error']}", file=sys.stderr)
    if run.returncode != 0:
        partial = f"; partial trace in {out}" if run.traces else ""
        print(f"perflab: the command exited with status {run.returncode}{partial}", file=sys.stderr)
        raise SystemExit(run.returncode)
    if not run.traces:
        raise PerflabError(f"no trace written: {run.explain_missing(found, warmup)}")
    first = next(p for p in run.processes if p.get("trace"))
    where = run.traces[0] if len(run.traces) == 1 else f"{out} ({len(run.traces)} ranks)"
    print(f"perflab: {first['recorded_steps']} steps recorded ({first['steps_by']}) after {warmup} warm-up "
          f"-> {where}")
    for line in lib.compile_lines(first):
        print(line)
    traces = run.traces[0] if len(run.traces) == 1 else out
    report = _diagnose_quietly(traces)
    _remember(found, out, report)
    console = safe_console(highlight=False, soft_wrap=True)
    console.print(lib.doctor_summary(traces, report=report))
    from perflab.history import runs_with_trace

    if runs_with_trace() >= 2:
        console.print("perflab: this run is run:1 in the history (`perflab diff run:2 run:1` compares it with the one "
                      "before)")
    else:
        console.print("perflab: this run is run:1 in the history; profile again after a change, then "
                      "`perflab diff run:2 run:1` compares the two")
    if html is None or report is None:
        return
    from perflab.outputs import write_output
    from perflab.report.html import report_html

    console.print(f"perflab: HTML report -> {write_output(html, report_html(report), force=force)}")


def _diagnose_quietly(traces: Path) -> Any:
    """The doctor's report, or None when it fails: doctor_summary then says why, and the trace stays."""
    from perflab.errors import PerflabError

    try:
        from perflab.doctor import diagnose

        return diagnose(traces)
    except PerflabError:
        return None
    except Exception:  # the doctor is another layer: its failure must not lose the run
        return None


def _remember(found: dict[str, str], out: Path, report: Any) -> None:
    """A row in the run history (mode `profile`), so `perflab diff run:N` finds this run."""
    from perflab.puzzles.engine.progress import ProgressDB

    what = Path(found.get("script", "")).name or found.get("module") or "script"
    step_ms = ((report.analyses or {}).get("summary") or {}).get("step_time_ms") if report is not None else None
    from perflab.errors import PerflabError

    try:
        with ProgressDB() as db:
            db.add_run("profile", what, "profile", str(Path(out).resolve()), step_ms)
    except PerflabError as exc:  # the trace is written; a history that cannot take it must not fail the run
        print(f"perflab: not in the run history: {exc}", file=sys.stderr)


def monitor(
    cmd: Optional[List[str]] = CMD,
    interval: float = typer.Option(0.1, help="seconds between samples"),
    csv: Optional[Path] = typer.Option(None, help="write every sample to this CSV file"),
    device: int = typer.Option(0, help="CUDA device index"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing --csv file"),
) -> None:
    """Watch the GPU (utilization, memory, power, clocks, temperature) while CMD runs; summary at the end."""
    from perflab.errors import PerflabError
    from perflab.toolkit.monitor import GPUMonitor
    from perflab.toolkit.profile import start_command, wait

    if not cmd:
        raise PerflabError("give the command to watch, e.g. `perflab monitor -- python script.py`")
    if csv is not None:
        from perflab.outputs import check_output

        check_output(csv, force=force)  # before the command runs, not after
    mon = GPUMonitor(interval=interval, device=device)
    mon.open()  # no NVML: one-line error before anything runs
    console = safe_console()
    mon.start()
    try:
        rc = _run_live(cmd, mon, console) if console.is_terminal else wait(start_command(cmd))
    finally:
        mon.stop()
    console.print(_summary_table(mon.summary()))
    if csv is not None:
        console.print(f"samples -> {mon.to_csv(csv, force=force)}")
    raise SystemExit(rc)


def _run_live(cmd: List[str], mon: Any, console: Any) -> int:
    """The live view; CMD's output is passed through above it (a child writing to the terminal
    directly would tear the view)."""
    import os

    from rich.live import Live
    from rich.text import Text

    from perflab.toolkit.profile import start_command, wait

    proc = start_command(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    t0 = time.perf_counter()
    with Live(_live_table(mon, 0.0), console=console, refresh_per_second=4) as live:
        def pump() -> None:
            for line in iter(proc.stdout.readline, b""):
                live.console.print(Text.from_ansi(line.decode(errors="replace").rstrip("\n")))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        while proc.poll() is None:
            live.update(_live_table(mon, time.perf_counter() - t0))
            time.sleep(0.25)
        reader.join()
    return wait(proc)


def _bar(pct: float | None, width: int = 30) -> str:
    if pct is None:
        return ""
    filled = round(max(0.0, min(pct, 100.0)) / 100 * width)
    return "█" * filled + "·" * (width - filled)


def _fmt(value: Any, unit: str = "", digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}{unit}"


def _live_table(mon: Any, elapsed: float) -> Any:
    from rich.table import Table

    from perflab.toolkit.monitor import decode_throttle

    s = mon.latest() or {}
    table = Table(title=f"{mon.name} · {elapsed:.1f} s · every {mon.interval * 1000:g} ms", show_header=False)
    table.add_row("GPU util", _fmt(s.get("gpu_util_pct"), " %"), _bar(s.get("gpu_util_pct")))
    table.add_row("memory util", _fmt(s.get("mem_util_pct"), " %"), _bar(s.get("mem_util_pct")))
    table.add_row("memory used", _fmt(s.get("mem_used_mib"), " MiB"), "")
    table.add_row("power", _fmt(s.get("power_w"), " W"), mon.power_source)
    table.add_row("clocks", f"SM {_fmt(s.get('sm_clock_mhz'))} / mem {_fmt(s.get('mem_clock_mhz'))} MHz", "")
    table.add_row("temperature", _fmt(s.get("temp_c"), " °C"), "")
    table.add_row("clock limits", ", ".join(decode_throttle(s.get("throttle"))) or "none", "")
    return table


def _summary_table(summary: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"GPU summary · {summary['device']}", show_header=False)
    rows = [
        ("duration", _fmt(summary["duration_s"], " s", 2) + f" ({summary['samples']} samples)"),
        ("energy", f"{_fmt(summary['energy_j_counter'], ' J', 1)} (counter), "
                   f"{_fmt(summary['energy_j_integrated'], ' J', 1)} (∫power dt, {summary['power_source']})"),
        ("power", f"mean {_fmt(summary['mean_power_w'], ' W')}, max {_fmt(summary['max_power_w'], ' W')}"),
        ("GPU util", f"mean {_fmt(summary['mean_gpu_util_pct'], ' %')}"),
        ("peak memory", _fmt(summary["peak_mem_used_mib"], " MiB")),
        ("SM clock", f"mean {_fmt(summary['mean_sm_clock_mhz'])}, min {_fmt(summary['min_sm_clock_mhz'])} MHz"),
        ("clock limits", ", ".join(f"{k} {v:.0%}" for k, v in summary["throttle"].items()) or "none"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    return table
