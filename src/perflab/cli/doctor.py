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
        from perflab.cli.activity import activity

        with activity(quiet=json_out) as say:
            say(f"reading and diagnosing {path}")
            report = diagnose(path, rank=rank, step=step, nvtx_steps=nvtx_steps)
            if html is not None:
                from perflab.report.html import report_html

                say(f"writing {html}")
                html = write_output(html, report_html(report), force=force, inputs=[path])
        if json_out:
            from perflab.report.json import report_json

            typer.echo(report_json(report))
        else:
            from perflab.report.terminal import render_report

            render_report(report)
        if html is not None:
            typer.echo(f"wrote {html}", err=json_out)
