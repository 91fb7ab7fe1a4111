"""perflab doctor PATH: what holds the workload back, with evidence."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(
        path: Path = typer.Argument(..., help="Kineto trace (.json/.json.gz), folder of per-rank traces, Nsight "
                                              "Systems export (.sqlite; .nsys-rep through nsys), Nsight Compute "
                                              "report or memory snapshot; a folder of one program's trace, ncu "
                                              "reports and snapshot (what perflab investigate writes) gives the "
                                              "merged top-down report; or run:N, the N-th latest run in the run "
                                              "history (perflab profile, perflab run)."),
        json_out: bool = typer.Option(False, "--json", help="Print the versioned JSON report (perflab.doctor/2)."),
        rank: Optional[int] = typer.Option(None, "--rank", help="Which rank of a multi-rank trace folder."),
        step: Optional[int] = typer.Option(None, "--step", help="Only ProfilerStep#N."),
        html: Optional[Path] = typer.Option(None, "--html", help="Also write a self-contained HTML report here."),
        force: bool = typer.Option(False, "--force", help="Overwrite an existing --html file."),
        nvtx_steps: str = typer.Option("auto", "--nvtx-steps", metavar="REGEX|auto|none",
                                       help="Nsight Systems: the NVTX ranges that are steps (a regular expression "
                                            "on the range name, group 1 the step number); auto: ProfilerStep#N, "
                                            "else 'step N' / 'iteration N' / 'batch N'; none: no steps."),
        marker: Optional[str] = typer.Option(None, "--marker", metavar="REGEX",
                                             help="A serving loop's iteration ranges: each host range whose name "
                                                  "matches is one iteration; named groups prefill/decode (tokens) "
                                                  "and prefill_reqs/decode_reqs give what the name carries. "
                                                  "Default: vLLM's, SGLang's and TensorRT-LLM's own markers."),
        model: Optional[str] = typer.Option(None, "--model", metavar="CONFIG[,key=value...]",
                                            help="The model the trace ran (an HF config.json, or layers=,hidden=,"
                                                 "intermediate=,heads=,kv_heads=,vocab=,dtype=; then tp=, ep=, "
                                                 "kv_dtype=, context=): prices each serving iteration against "
                                                 "its speed of light, graph replays included."),
        scheduler: Optional[str] = typer.Option(None, "--scheduler", metavar="tcp://HOST:PORT",
                                                help="A folder of ranks: read them on this Dask cluster (default: "
                                                     "$DASK_SCHEDULER_ADDRESS, else a local one sized to this "
                                                     "machine, or this process for a few small ranks). Its "
                                                     "workers must see the same paths."),
    ) -> None:
        """Diagnose a profile: findings ranked by the share of step time they cost."""
        from perflab.doctor import diagnose

        from perflab.history import HISTORY_REF, resolve
        from perflab.outputs import check_output, write_output

        if not path.exists() and HISTORY_REF.fullmatch(str(path)):
            path = resolve(str(path))[0]
        if html is not None:
            check_output(html, force=force, inputs=[path])
        from perflab.doctor.investigation_files import is_investigation

        if is_investigation(path):  # one program's trace, ncu reports, snapshot: the merged, top-down report
            from perflab.cli.investigate import show
            from perflab.doctor.investigation import build

            from perflab.cli.activity import activity

            with activity(quiet=json_out) as say:
                say(f"reading {path}")
                inv = build(path)
            show(inv, json_out=json_out, html=html, force=force, inputs=[path])
            return
        if _is_rank_folder(path):  # its own progress bar over ranks
            if marker or model:
                from perflab.errors import PerflabError

                raise PerflabError(f"{path}: --marker and --model read one trace; give one rank's file")
            report = _diagnose_ranks(path, rank=rank, step=step, scheduler=scheduler)
        elif scheduler:
            from perflab.errors import PerflabError

            raise PerflabError(f"{path}: --scheduler reads a folder of per-rank traces; this is one file")
        else:
            from perflab.cli.activity import activity

            with activity(quiet=json_out) as say:
                say(f"reading and diagnosing {path}")
                report = diagnose(path, rank=rank, step=step, nvtx_steps=nvtx_steps, marker=marker, model=model)
        if html is not None:
            from perflab.report.html import report_html

            html = write_output(html, report_html(report), force=force, inputs=[path])
        if json_out:
            from perflab.report.json import report_json

            typer.echo(report_json(report))
        else:
            from perflab.report.terminal import render_report

            render_report(report)
        if html is not None:
            typer.echo(f"wrote {html}", err=json_out)


def _is_rank_folder(path: Path) -> bool:
    from perflab.multirank.store import is_url

    return is_url(_url_of(path)) or path.is_dir()


def _url_of(path: Path) -> str:
    """The argument as given: a URL (s3://b/k) comes through Path as s3:/b/k."""
    import re

    text = str(path)
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)", r"\1://", text) if not path.exists() else text


def _diagnose_ranks(path: Path, *, rank, step, scheduler):
    """A folder of ranks, one rank at a time (perflab.multirank), with a progress bar on a terminal's stderr."""
    import sys

    from perflab.multirank import diagnose_folder

    folder = _url_of(path)
    if not sys.stderr.isatty():
        return diagnose_folder(folder, rank=rank, step=step, scheduler=scheduler)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from perflab.report.console import safe_console

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=safe_console(stderr=True), transient=True) as bar:
        task = bar.add_task("ranks", total=None)

        def told(plan) -> None:
            bar.update(task, description=f"ranks ({plan.describe()})")

        return diagnose_folder(folder, rank=rank, step=step, scheduler=scheduler, on_plan=told,
                               progress=lambda done, total: bar.update(task, completed=done, total=total))
