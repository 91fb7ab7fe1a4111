"""perflab scale -- script.py ARGS: the script under torchrun at several GPU counts, efficiency and comm time."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

PASSTHROUGH = {"allow_interspersed_args": False}

SCALE_HELP = (
    "Run a script under torchrun at each GPU count; print strong/weak scaling efficiency and the "
    "communication time isolated from per-rank traces; plot it.\n\n"
    "The script reads PERFLAB_SCALE_MODE (or calls perflab.toolkit.scaling.per_rank_batch) and reports "
    "its step times with perflab.toolkit.scaling.report_step_times; without a report the traces give "
    "the step times. torchrun options (--nnodes, --rdzv-endpoint, ...) go in --torchrun."
)


def register(app: typer.Typer) -> None:
    app.command("scale", context_settings=PASSTHROUGH, help=SCALE_HELP)(scale)


def scale(
    cmd: Optional[List[str]] = typer.Argument(None, metavar="-- SCRIPT.py ARGS", help="the script and its arguments"),
    gpus: str = typer.Option("1,2", "--gpus", help="GPU (process) counts per node, e.g. 1,2,4"),
    mode: str = typer.Option("strong", "--mode", help="strong (fixed global batch) or weak (fixed batch per rank)"),
    torchrun: Optional[str] = typer.Option(None, "--torchrun", help="extra torchrun options, quoted, e.g. "
                                                                  "'--nnodes 2 --rdzv-endpoint host:29500'"),
    nnodes: Optional[str] = typer.Option(None, "--nnodes", help="passed to torchrun"),
    rdzv_endpoint: Optional[str] = typer.Option(None, "--rdzv-endpoint", help="passed to torchrun"),
    rdzv_id: Optional[str] = typer.Option(None, "--rdzv-id", help="passed to torchrun"),
    out: Optional[Path] = typer.Option(None, "--out", help="folder for reports, traces, scaling.json, plot "
                                                         "[default: a new folder under ./perflab-work/scale]"),
    force: bool = typer.Option(False, "--force", help="replace what an earlier run left in --out"),
    profile: bool = typer.Option(True, "--profile/--no-profile", help="trace each rank to isolate communication"),
    steps: int = typer.Option(5, help="profiled steps per run"),
    warmup: int = typer.Option(3, help="unprofiled steps first"),
    marker: Optional[str] = typer.Option(None, help="record_function/NVTX range that marks a step"),
    json_out: bool = typer.Option(False, "--json", help="print scaling.json instead of the table"),
) -> None:
    """(help: SCALE_HELP)"""
    import json
    import shlex

    from rich.table import Table

    from perflab.toolkit import scaling

    from perflab.outputs import check_folder, new_folder
    from perflab.paths import workspace_dir

    counts = scaling.parse_counts(gpus)
    if out is not None:
        check_folder(out, force=force, holds=("scaling.json", "scaling.png", "n[0-9]*"))
    extra = shlex.split(torchrun) if torchrun else []
    for flag, value in (("--nnodes", nnodes), ("--rdzv-endpoint", rdzv_endpoint), ("--rdzv-id", rdzv_id)):
        if value:
            extra += [flag, value]
    if any(a.startswith("--rdzv-endpoint") for a in extra) and not any(a.startswith("--rdzv-backend") for a in extra):
        extra += ["--rdzv-backend", "c10d"]
    from perflab.report.console import safe_console

    console = safe_console(stderr=json_out)
    out = out if out is not None else new_folder(workspace_dir() / "scale")
    result = scaling.run_scaling(cmd or [], counts, out, mode=mode, torchrun_args=extra, profile=profile,
                                 steps=steps, warmup=warmup, marker=marker,
                                 on_point=lambda n: console.print(f"running on {n} GPU(s) ...", style="dim"))
    plot_path = None
    if any(p.get("step_ms") for p in result["points"]):
        plot_path = scaling.plot(result, out / "scaling.png", force=force)
    if json_out:
        typer.echo(json.dumps(result, indent=1, default=str))
    else:
        table = Table(title=f"{mode} scaling ({result['device']})")
        for col in scaling.TABLE_HEADER:
            table.add_column(col, justify="right")
        for row in scaling.table_rows(result):
            table.add_row(*row)
        console.print(table)
        console.print(f"wrote {out / 'scaling.json'}" + (f" and {plot_path}" if plot_path else ""))
    failed = [p for p in result["points"] if p["returncode"] != 0]
    if failed:
        raise SystemExit(failed[0]["returncode"] or 1)
