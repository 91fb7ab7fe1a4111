"""perflab CLI: kernel-level tools — `ncu` (profile + doctor), `bench` (ceilings), `roofline`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from perflab.errors import PerflabError
from perflab.report.console import safe_console


def _print_report(report, as_json: bool) -> None:
    from rich.table import Table
    from rich.text import Text

    if as_json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
        return
    console = safe_console()
    console.print(Text(report.verdict, style="bold"))
    for note in report.source.get("notes") or []:
        console.print(Text("note: " + note, style="yellow"))
    table = Table("kernel", "finding", "severity", "gain %", "evidence", "fix", show_lines=True)
    for f in report.findings:
        ev = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in f.evidence.items()
                       if k not in ("kernel", "kernel_gain_pct", "measured_by", "roof") and v is not None)
        table.add_row(str(f.evidence.get("kernel", ""))[:48], f.id, f.severity, f"{f.gain_pct:.0f}", ev[:240], f.fix)
    console.print(table)


def ncu(
    program: Optional[List[str]] = typer.Argument(None, help="the program to profile, after `--`"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="regex of the kernel names to profile"),
    section_set: str = typer.Option("full", "--set", help="ncu section set (full, detailed, basic, roofline), or "
                                                           "doctor: only what the kernel doctor reads (fewer replays)"),
    launch_count: int = typer.Option(3, "--launch-count", "-c", help="kernel launches to profile"),
    launch_skip: int = typer.Option(0, "--launch-skip", "-s", help="matching launches to skip first"),
    out: Path = typer.Option(Path("perflab-ncu"), "--out", "-o", help="folder for the .ncu-rep and .csv"),
    name: Optional[str] = typer.Option(None, "--name", help="report file name (default: the script's name)"),
    as_json: bool = typer.Option(False, "--json", help="print the doctor's report as JSON"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing report of the same name"),
    kill: bool = typer.Option(False, "--kill", help="stop the program once the launches are profiled (ncu --kill yes)"),
) -> None:
    """Profile a program under Nsight Compute (--clock-control none), export the raw CSV, run the doctor."""
    from perflab.doctor.ncu import diagnose_ncu
    from perflab.toolkit.ncu_runner import profile

    run = profile(list(program or []), out_dir=out, name=name, kernel=kernel, section_set=section_set,
                  launch_count=launch_count, launch_skip=launch_skip, force=force, kill=kill)
    if not as_json:
        typer.echo(f"wrote {run.report} and {run.csv}")
    _print_report(diagnose_ncu(run.report), as_json)


def _bench_allreduce(gpus: Optional[int], out: Optional[Path], max_bytes: int, as_json: bool, force: bool) -> None:
    from rich.table import Table

    from perflab.paths import user_data_dir
    from perflab.toolkit.bench import allreduce

    if out is not None:
        from perflab.outputs import check_output

        check_output(out, force=force)  # before the sweep; the user data dir's copy is perflab's own store

    gpus = gpus or _visible_gpus()
    dest = out or user_data_dir() / "allreduce.json"
    doc = allreduce.run_allreduce_bench(gpus, dest, max_bytes=max_bytes)
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    m = doc["manifest"]
    table = Table("size", "time µs", "algbw GB/s", "busbw GB/s",
                  title=f"all_reduce {doc['dtype']} sum, {doc['world_size']} ranks, {doc['backend']} on "
                        f"{m.get('gpu', 'CPU')} ({m['date']})")
    for row in allreduce.table_rows(doc):
        table.add_row(*row)
    safe_console().print(table)
    typer.echo(f"peak busbw {doc['peak_busbw_gbps']:.2f} GB/s; saved {dest}")


def _bench_collectives(kinds: str, gpus: Optional[int], out: Optional[Path], plot: Optional[Path], min_bytes: int,
                       max_bytes: int, as_json: bool, force: bool) -> None:
    from rich.table import Table

    from perflab.outputs import check_output
    from perflab.paths import user_data_dir
    from perflab.toolkit.bench import collectives as C

    chosen = C.parse_kinds(kinds)
    for path in (out, plot):
        if path is not None:
            check_output(path, force=force)  # before the sweeps
    gpus = gpus or _visible_gpus()
    dest = out or user_data_dir() / "collectives.json"
    doc = C.run_collectives_bench(gpus, dest, chosen, min_bytes=min_bytes, max_bytes=max_bytes)
    if plot is not None:
        C.plot(doc, plot, force=force)
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    m = doc["manifest"]
    table = Table("collective", "size", "time µs", "algbw GB/s", "busbw GB/s",
                  title=f"{doc['world_size']} ranks, {doc['backend']} on {m.get('gpu', 'CPU')} ({m['date']})")
    for row in C.table_rows(doc):
        table.add_row(*row)
    safe_console().print(table)
    peaks = ", ".join(f"{k} {s['peak_busbw_gbps']:.2f}" for k, s in doc["sweeps"].items())
    typer.echo(f"peak busbw GB/s: {peaks}; saved {dest}" + (f" and {plot}" if plot else ""))


def _visible_gpus() -> int:
    import torch

    return max(torch.cuda.device_count(), 1) if torch.cuda.is_available() else 2


def bench(
    quick: bool = typer.Option(False, "--quick", help="smaller sizes, fewer repeats (under 30 s)"),
    as_json: bool = typer.Option(False, "--json", help="print the ceilings as JSON"),
    out: Optional[Path] = typer.Option(None, "--out", help="also write the JSON here"),
    allreduce: bool = typer.Option(False, "--allreduce", help="only the all-reduce bus-bandwidth sweep, under "
                                                              "torchrun over --gpus processes (nccl-tests style)"),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="--allreduce: processes (GPUs) per node "
                                                            "[default: all visible GPUs]"),
    collectives: Optional[str] = typer.Option(
        None, "--collectives", help="only bus-bandwidth sweeps of these collectives (comma-separated: all_reduce,"
        "all_gather,reduce_scatter,all_to_all), under torchrun over --gpus processes, saved with the topology "
        "as collectives.json (user data dir, or --out) where the doctor's comm-below-roof reads them"),
    min_bytes: int = typer.Option(1 << 10, "--min-bytes", help="--collectives: smallest message"),
    max_bytes: int = typer.Option(1 << 30, "--max-bytes", help="--allreduce/--collectives: largest message"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="--collectives: draw busbw vs size (.png/.svg/.pdf)"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing --out file"),
) -> None:
    """Measure this machine's ceilings and save them (user data dir, ceilings.json) for the roofline."""
    from rich.table import Table

    from perflab.toolkit.bench import run_bench, save_ceilings, table_rows

    console = safe_console(stderr=True)
    if allreduce and collectives:
        raise PerflabError("--allreduce and --collectives are two ways to sweep: give one "
                           "(--collectives all_reduce is the first with the others)")
    if allreduce:
        _bench_allreduce(gpus, out, max_bytes, as_json, force)
        return
    if collectives:
        _bench_collectives(collectives, gpus, out, plot, min_bytes, max_bytes, as_json, force)
        return
    if out is not None:
        from perflab.outputs import check_output

        check_output(out, force=force)  # before the measurements; ceilings.json in the user data dir is ours
    data = run_bench(quick=quick, progress=None if as_json else (lambda m: console.print(f"measuring {m}", style="dim")))
    path = save_ceilings(data)
    if out:
        from perflab.outputs import write_output

        write_output(out, json.dumps(data, indent=2), force=force)
    if as_json:
        print(json.dumps(data, indent=2))
        return
    m = data["manifest"]
    table = Table("ceiling", "value", "how", title=f"{m['gpu']} — driver {m.get('driver')}, torch {m['torch']}, "
                  f"{m['date']} ({m['mode']}, {m['seconds']} s)")
    for row in table_rows(data):
        table.add_row(*row)
    safe_console().print(table)
    typer.echo(f"saved {path}")


def roofline(
    reports: list[Path] = typer.Argument(..., help="one or more .ncu-rep files or raw-page CSV exports"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the figure (.png, .svg, .pdf or .html)"),
    ceilings: Optional[Path] = typer.Option(None, "--ceilings", help="ceilings JSON (default: the saved bench)"),
    as_json: bool = typer.Option(False, "--json", help="print the roofline points as JSON"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing --out file"),
) -> None:
    """Place each kernel of a report on the roofline of the measured (or datasheet) ceilings."""
    from rich.table import Table

    from perflab.analysis.work.roofline import roofline_for_reports
    from perflab.outputs import check_output
    from perflab.report.roofline_plot import check_roofline_path, save_roofline

    inputs = [*reports, ceilings]
    if out:
        check_output(check_roofline_path(out), force=force, inputs=inputs)  # before the work
    model = roofline_for_reports(reports, ceilings_path=ceilings)
    if out:
        save_roofline(model, out, force=force, inputs=inputs)
    if as_json:
        print(json.dumps(model.to_dict(), indent=2))
        return
    table = Table("kernel", "FLOP/byte", "TFLOP/s", "GB/s", "roof", "bound", "% of roof",
                  title=f"roofline — ceilings: {model.ceilings_source}")
    for p in model.points:
        table.add_row(p.name[:60], f"{p.intensity:.2f}" if p.intensity is not None else "-",
                      f"{p.flops_per_s / 1e12:.2f}", f"{p.dram_bytes_per_s / 1e9:.0f}", p.roof.split(" (")[0], p.bound,
                      f"{p.pct_of_roof:.0f}")
    safe_console().print(table)
    if out:
        typer.echo(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.command("ncu", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(ncu)
    app.command("bench")(bench)
    app.command("roofline")(roofline)
