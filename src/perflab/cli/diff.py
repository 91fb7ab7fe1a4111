"""perflab diff BEFORE AFTER: two profiles of the same workload compared."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from perflab.errors import PerflabError

DIFF_HELP = (
    "Compare two profiles: step time (median and spread), GPU busy, GPU time per step by kernel type and "
    "by kernel, and the doctor's findings that appeared, disappeared or changed severity.\n\n"
    "BEFORE and AFTER are Kineto traces (.json/.json.gz), folders of per-rank traces, Nsight Systems exports "
    "(.sqlite; .nsys-rep through nsys; the two sides may be of different formats), or run:N for the N-th latest "
    "run that `perflab run` recorded (run:1 is the latest).\n\n"
    "Or two Nsight Compute reports (.ncu-rep or its raw-page CSV, gzipped or not) of the same kernel(s) "
    "under two configurations: a kernel-level diff, per matched kernel the key metrics (duration, grid, "
    "waves per SM, occupancy, DRAM/SM throughput, L2 hit rate, registers, ...) sorted by how far they "
    "moved, and the doctor's findings that appeared or disappeared (--kernel REGEX picks kernels).\n\n"
    "For CI, --gate PCT exits 1 when the step time got slower by more than PCT %: the 95 % confidence interval "
    "of the change in median step time (bootstrap over both traces' per-step times) must lie above PCT. Two "
    "profiles that cannot be compared (another GPU, driver or clock, other matmul shapes, fewer than 5 steps a "
    "side) are refused with the reason (exit 2)."
)


def register(app: typer.Typer) -> None:
    app.command("diff", help=DIFF_HELP)(diff)


def diff(
    before: str = typer.Argument(..., metavar="BEFORE", help="trace, folder of per-rank traces, or run:N"),
    after: str = typer.Argument(..., metavar="AFTER", help="trace, folder of per-rank traces, or run:N"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object (schema perflab.diff/1)"),
    html: Optional[Path] = typer.Option(None, "--html", help="also write a self-contained HTML report here"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="also draw the comparison (.png, .svg or .pdf)"),
    rank: Optional[int] = typer.Option(None, "--rank", help="which rank of multi-rank trace folders"),
    top: int = typer.Option(10, "--top", min=1, help="kernels to list"),
    force: bool = typer.Option(False, "--force", help="overwrite existing --html/--plot files"),
    gate_pct: Optional[float] = typer.Option(None, "--gate", metavar="PCT", min=0.0,
                                             help="exit 1 when the step time got slower by more than PCT % beyond "
                                                  "noise (95 % CI); exit 2 when the profiles are not comparable"),
    kernel: Optional[str] = typer.Option(None, "--kernel", help="Nsight Compute reports: compare only kernels "
                                         "whose name matches this regular expression"),
    nvtx_steps: str = typer.Option("auto", "--nvtx-steps", metavar="REGEX|auto|none",
                                   help="Nsight Systems: the NVTX ranges that are steps (see perflab doctor --help)"),
) -> None:
    """Compare two profiles (help: DIFF_HELP)."""
    from perflab.history import resolve
    from perflab.outputs import check_output, write_output

    if _ncu_pair(before, after):
        if html is not None or plot is not None or rank is not None or gate_pct is not None:
            raise PerflabError("--html, --plot, --rank and --gate apply to trace diffs, not to Nsight Compute reports")
        _ncu_diff(before, after, kernel or "", json_out)
        return
    if kernel is not None:
        raise PerflabError("--kernel selects kernels of two Nsight Compute reports; BEFORE and AFTER are traces")

    inputs = [resolve(before)[0], resolve(after)[0]]
    for out in (html, plot):
        if out is not None:
            check_output(out, force=force, inputs=inputs)  # refuse before the work, not after it
    if plot is not None:
        from perflab.report.diff import check_plot_path

        check_plot_path(plot)
    from perflab.cli.activity import activity
    from perflab.report.documents import diff_result

    written = []
    with activity(quiet=json_out) as say:
        result, b, a = diff_result(before, after, rank=rank, top=top, gate_pct=gate_pct, nvtx_steps=nvtx_steps,
                                   say=say)
        if html is not None:
            from perflab.report.html import diff_html

            say(f"writing {html}")
            written.append(write_output(html, diff_html(result, b.report, a.report), force=force, inputs=inputs))
        if plot is not None:
            from perflab.report.diff import save_diff_plot

            say(f"writing {plot}")
            written.append(save_diff_plot(result, plot, force=force, inputs=inputs))
    if json_out:
        from perflab.report.diff import diff_json

        typer.echo(diff_json(result))
    else:
        from perflab.report.diff import render_diff

        render_diff(result)
        if result.gate is not None:
            typer.echo(f"gate {gate_pct:g} %: {result.gate['verdict']}")
    for path in written:
        typer.echo(f"wrote {path}", err=json_out)
    if result.gate is not None and result.gate["failed"]:
        raise SystemExit(1)


_KIND_WORDS = {"ncu": "an Nsight Compute report", "ncu-csv": "an Nsight Compute CSV export",
               "memory": "a memory snapshot", "kineto": "a Kineto trace", "kineto-dir": "a folder of traces",
               "nsys": "an Nsight Systems export", "nsys-rep": "an Nsight Systems report"}


def _kind(ref: str) -> str:
    """What a diff argument holds, by content; run:N and missing paths count as traces (resolve explains)."""
    from perflab.trace import sniff

    path = Path(ref)
    if not path.exists():
        return sniff.KINETO
    return sniff.sniff(path)


def _ncu_pair(before: str, after: str) -> bool:
    """True for two Nsight Compute reports; a one-line error for one report and one other thing."""
    from perflab.trace import sniff

    ncu = (sniff.NCU, sniff.NCU_CSV)
    kb, ka = _kind(before), _kind(after)
    if (kb in ncu) != (ka in ncu):
        raise PerflabError(f"{before} is {_KIND_WORDS.get(kb, kb)} and {after} is {_KIND_WORDS.get(ka, ka)}: "
                           "perflab diff compares traces (Kineto or Nsight Systems) with traces, or two Nsight Compute reports; "
                           "not one of each")
    return kb in ncu


def _ncu_diff(before: str, after: str, kernel: str, json_out: bool) -> None:
    from perflab.analysis.ncu.ncu_compare import compare_ncu
    from perflab.doctor.sides import load_ncu_side

    pb, rb = load_ncu_side(before)
    pa, ra = load_ncu_side(after)
    result = compare_ncu(pb, pa, rb, ra, kernel=kernel, before_label=before, after_label=after)
    if json_out:
        from perflab.report.diff import ncu_diff_json

        typer.echo(ncu_diff_json(result))
    else:
        from perflab.report.diff import render_ncu_diff

        render_ncu_diff(result)
