"""perflab CLI: `perflab investigate -- CMD`, the top-down walk (timeline, kernels, memory) in one command."""
from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from perflab.cli.toolkit import CMD, PASSTHROUGH

HELP = (
    "Walk your program top-down in one command: the timeline (torch.profiler and the doctor), then the kernels that "
    "would save the most at their speed of light (all in one run under Nsight Compute, each launch chosen from the "
    "timeline, the metrics the kernel doctor reads), "
    "then memory when the timeline says it is the issue (the allocator's history). One report, each level with its "
    "finding, estimated gain, evidence and the commands that reproduce it by hand.\n\n"
    "Each run gets a new folder under ./perflab-work/investigate/; `perflab doctor FOLDER` prints its report again."
)
HOLDS = ("investigation.json", "trace.json.gz", "rank*.trace.json.gz", "ncu-*", "memory.json.gz")


def register(app: typer.Typer) -> None:
    app.command("investigate", context_settings=PASSTHROUGH, help=HELP)(investigate)


def investigate(
    cmd: Optional[List[str]] = CMD,
    kernels: int = typer.Option(3, "--kernels", "-n", help="kernels to profile under Nsight Compute, at most"),
    min_gain: float = typer.Option(3.0, "--min-gain", help="profile a kernel only when it would save this % of the "
                                                           "step at its speed of light"),
    memory: str = typer.Option("auto", "--memory", help="level 3: auto (when level 1 shows a memory problem), "
                                                        "always, never"),
    steps: int = typer.Option(10, help="steps to record at level 1"),
    warmup: int = typer.Option(3, help="steps to run first, unrecorded"),
    ncu_timeout: float = typer.Option(300.0, "--ncu-timeout", help="seconds one Nsight Compute run may take"),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="seconds the program may take at levels 1 and 3"),
    marker: Optional[str] = typer.Option(None, help="a step begins where a record_function/NVTX range of this name "
                                                    "opens"),
    target: Optional[str] = typer.Option(None, help="the script or module to profile when it is not the first .py "
                                                    "in CMD"),
    slice_s: float = typer.Option(0.1, "--slice", help="seconds per step when steps are time slices"),
    out: Optional[Path] = typer.Option(None, help="folder for the evidence \\[default: a new folder under "
                                                  "./perflab-work/investigate]"),
    json_out: bool = typer.Option(False, "--json", help="print the report as JSON (perflab.investigation/1)"),
    html: Optional[Path] = typer.Option(None, "--html", help="also write the report as a self-contained HTML file"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing --html file, or an earlier run in --out"),
    # the earlier way, kept for side-by-side timing (benchmarks/investigate_one_pass.py): a run per kernel, --set full
    ncu_runs: str = typer.Option("one", "--ncu-runs", hidden=True),
    ncu_set: str = typer.Option("doctor", "--ncu-set", hidden=True),
    memory_run: str = typer.Option("level1", "--memory-run", hidden=True),
) -> None:
    """Walk a program top-down (help: HELP)."""
    from perflab.errors import PerflabError
    from perflab.outputs import check_folder, check_output, new_folder
    from perflab.toolkit.investigate import Options, Walk, default_out

    if not cmd:
        raise PerflabError("give the program to investigate, e.g. `perflab investigate -- python app.py`")
    inputs = [a for a in cmd if Path(a).is_file()]
    if html is not None:
        check_output(html, force=force, inputs=inputs)  # before the runs
    opts = Options(steps=steps, warmup=warmup, kernels=kernels, min_gain_pct=min_gain, memory=memory,
                   ncu_timeout_s=ncu_timeout, timeout_s=timeout, marker=marker, target=target, slice_s=slice_s,
                   ncu_runs=ncu_runs, section_set=ncu_set, memory_run=memory_run)
    if out is not None:
        check_folder(out, force=force, holds=HOLDS)
    walk = Walk(cmd, out or Path("."), opts)  # checks the options and finds the target before anything runs
    walk.out = out if out is not None else new_folder(default_out())
    with _progress() as progress:
        walk.progress = progress
        inv = walk.run()
    show(inv, json_out=json_out, html=html, force=force, inputs=inputs)
    failed = [lv for lv in inv.to_dict()["levels"] if lv["status"] in ("failed", "timed-out", "partial")]
    if failed:
        raise SystemExit(1)


class _progress:
    """Progress on stderr while the levels run: a spinner on a terminal, one line per step otherwise."""

    def __enter__(self) -> Any:
        import time

        from perflab.report.console import safe_console

        self.console = safe_console(stderr=True, highlight=False)
        self.status = self.console.status("") if self.console.is_terminal else None
        self.t0 = time.perf_counter()
        if self.status is not None:
            self.status.__enter__()

        def report(level: int, message: str) -> None:
            from rich.text import Text

            line = Text(f"[{time.perf_counter() - self.t0:6.1f} s] level {level}: {message}")
            if self.status is not None:
                self.status.update(line)
            self.console.print(line, style="dim")

        return report

    def __exit__(self, *exc: Any) -> None:
        if self.status is not None:
            self.status.__exit__(*exc)


def show(inv: Any, *, json_out: bool, html: Optional[Path], force: bool, inputs: list) -> None:
    """Print the merged report (terminal or JSON) and write its HTML page; `perflab doctor FOLDER` shares it."""
    if json_out:
        from perflab.report.investigation_terminal import investigation_json

        typer.echo(investigation_json(inv))
    else:
        from perflab.report.investigation_terminal import render_investigation

        render_investigation(inv)
    if html is not None:
        from perflab.outputs import write_output
        from perflab.report.html import investigation_html

        written = write_output(html, investigation_html(inv), force=force, inputs=inputs)
        typer.echo(f"wrote {written}", err=json_out)
