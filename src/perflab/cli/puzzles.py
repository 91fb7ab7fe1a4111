"""perflab CLI: the puzzles (list, show, run, start, answer, check, hint, solution, progress).

Exit codes: 0 ok; 1 a wrong answer or a failed check; 2 bad input, unknown puzzle, no GPU where one is needed.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from perflab.errors import PerflabError
from perflab.paths import display_path
from perflab.cli.common import confirm, fail, openable
from perflab.cli.common import console as console_

if TYPE_CHECKING:  # each command imports what it runs, when it runs (perflab --help and list stay light)
    from rich.console import Console

    from perflab.puzzles.engine.spec import Puzzle

VARIANTS = ("slow", "solution", "mine")


def _gpu_words(p: Puzzle) -> str:
    if not p.requirements.gpu:
        return "no (CPU ok)"
    return f"yes (cc ≥ {p.requirements.min_cc})" if p.requirements.min_cc else "yes"


def list_cmd(tag: Optional[str] = typer.Option(None, "--tag", help="only puzzles tagged with this taxonomy id"),
             as_json: bool = typer.Option(False, "--json", help="one JSON object (schema perflab.list/1)")) -> None:
    """The catalog in curriculum order."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from perflab.puzzles.engine import catalog, progress, replay

    puzzles = catalog.load_catalog()
    if tag:
        puzzles = catalog.with_tag(puzzles, tag)
    with progress.ProgressDB() as db:
        statuses = db.statuses()
    rows = [(p, statuses.get(p.id, progress.PuzzleStatus(p.id)).label(p.question_keys)) for p in puzzles]
    if as_json:
        print(json.dumps({"schema": "perflab.list/1", "puzzles": [
            {"id": p.id, "title": p.title, "level": p.level, "order": p.order, "taxonomy": list(p.taxonomy),
             "gpu": p.requirements.gpu, "recorded": replay.is_recorded(p), "status": status}
            for p, status in rows]}, indent=2))
        return
    console = console_()
    compact = console.width < 120  # a narrow terminal: no titles or levels, the planted id and +N for the others
    cols = ("#", "id", "taxonomy", "GPU", "status") if compact else \
        ("#", "id", "title", "level", "taxonomy", "GPU", "status")
    t = Table(show_edge=False, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True) if compact \
        else Table(show_edge=False)
    for col in cols:
        t.add_column(col, no_wrap=compact, min_width=len(col))
    for i, (p, status) in enumerate(rows, 1):
        recorded = replay.is_recorded(p)
        if compact:
            tags = p.check.planted + (f" +{len(p.taxonomy) - 1}" if len(p.taxonomy) > 1 else "")
            gpu = ("GPU" if p.requirements.gpu else "CPU ok") + ("" if recorded else ", unrecorded")
            t.add_row(str(i), p.id, tags, gpu, status or "-")
        else:
            gpu = _gpu_words(p) + ("" if recorded else ", no replay yet")
            t.add_row(str(i), p.id, p.title, str(p.level), ", ".join(p.taxonomy), gpu, status or "-")
    console.print(t if rows else Text(f"no puzzles{' tagged ' + tag if tag else ''}"))


def show_cmd(puzzle_id: str = typer.Argument(..., metavar="ID")) -> None:
    """The story, the question, and which tool to use and what to look at."""
    from rich.markdown import Markdown
    from rich.text import Text

    from perflab.puzzles.engine import catalog, replay

    p = catalog.get(puzzle_id)
    console = console_()
    console.print(Text(f"{p.title}  [{p.id}, level {p.level}]", style="bold"))
    if p.prerequisites:
        console.print(f"after: {', '.join(p.prerequisites)}")
    console.print(Markdown(openable(p, p.story.strip())))
    console.print(Text.assemble(("\nQuestion: ", "bold"), p.question.strip()))
    console.print(Text.assemble(("Look at: ", "bold"), openable(p, p.look_at.strip()),
                                f"  (tools: {', '.join(p.tools) or '-'})"))
    recorded = replay.is_recorded(p)
    console.print(Text.assemble(("Runs on: ", "bold"), "a CUDA GPU" if p.requirements.gpu else "a GPU or the CPU",
                                "; without one, `run` replays the recorded evidence" if recorded else
                                "; not recorded yet, so nothing to replay without one"))
    if p.stages:
        console.print(Text.assemble(("Steps of the fix loop: ", "bold"), " -> ".join(("slow", *p.stages, "solution")),
                                    f"  (each one recorded: perflab run {p.id} --variant {p.stages[0]} --replay)"
                                    if recorded else "  (each one recorded with the puzzle)"))
    if p.questions:
        console.print(Text("\nDiagnosis (graded against the recorded evidence):", style="bold"))
        for q in p.questions:
            console.print(f"  {q.key} ({q.type}): {q.prompt}")
    console.print(f"\nNext: perflab run {p.id} · perflab hint {p.id} · perflab answer {p.id} · perflab start {p.id}")


def run_cmd(puzzle_id: str = typer.Argument(..., metavar="ID"),
            variant: str = typer.Option("slow", "--variant", help="slow | solution | mine (your fix.py) | a stage"),
            replay_: bool = typer.Option(False, "--replay", help="show the shipped recording even on a GPU"),
            steps: Optional[int] = typer.Option(None, "--steps", min=1, help="profiled steps (default: puzzle's)"),
            fix: Optional[Path] = typer.Option(None, "--fix", help="the file for --variant mine"),
            as_json: bool = typer.Option(False, "--json", help="one JSON object (schema perflab.run/1)")) -> None:
    """Profile a variant and print its evidence summary (a replay of the recording without a GPU)."""
    from perflab.puzzles.engine import catalog, progress, runner
    from perflab.report import summary as render

    p = catalog.get(puzzle_id)
    if variant not in VARIANTS + p.stages:
        raise PerflabError(f"unknown variant {variant!r}: use {', '.join(('slow', 'solution', *p.stages))} or mine")
    console = console_()
    o = _with_progress(console, f"profiling {p.id} ({variant})", lambda on_step: runner.run_or_replay(
        p, variant, force_replay=replay_, steps=steps, fix=fix, on_step=on_step))
    summary = o.evidence.summary(variant)
    folder = str(o.folder) if o.folder else None
    with progress.ProgressDB() as db:
        db.add_run(p.id, variant, o.mode, folder, summary.get("step_time_ms"))
    if as_json:
        print(json.dumps({"schema": "perflab.run/1", "puzzle": p.id, "variant": variant, "mode": o.mode,
                          "label": o.label, "path": folder, "manifest": o.manifest, "summary": summary,
                          "measurements": o.measurements}, indent=2))
        return
    if o.why_replay:
        console.print(f"(no live run here: {o.why_replay}; showing the shipped recording)", style="dim")
    console.print(render.render_summary(summary, title=f"{p.title} — {variant}", label=o.label,
                                        measurements=o.measurements))
    if p.requirements.gpus > 1:  # one trace per rank: the summary above is rank 0's
        _print_ranks(console, o.evidence, variant)
    if "ncu" in p.tools:  # kernel puzzles: the recording also holds Nsight Compute reports
        from perflab.puzzles.evidence import ncu as ncu_evidence

        if ncu_evidence.has(o.evidence.folder, variant):
            rep = display_path(ncu_evidence.rep_file(o.evidence.folder, variant))
            console.print(f"kernel evidence (Nsight Compute): {rep}  (perflab doctor {rep})")
    if o.folder:
        trace = display_path(o.evidence.trace_path(variant))
        console.print(f"artifacts: {display_path(o.folder)}  (perflab doctor {trace})")


def _print_ranks(console: Console, ev: Any, variant: str) -> None:
    from perflab.puzzles.questions.multirank import multirank

    s = multirank(ev, variant)
    for r in s["per_rank"]:
        wait = "-" if r["wait_ms"] is None else f"{r['wait_ms']:.3f}"
        console.print(f"rank {r['rank']}: step {r['step_ms']:.3f} ms, compute {r['compute_ms']:.3f}, "
                      f"comm {r['comm_ms']:.3f} (exposed {r['exposed_comm_ms']:.3f}, waiting {wait}) ms per step")
    console.print(f"per-rank traces: {display_path(ev.trace_path(variant))}  (perflab doctor FOLDER --rank R)")


def _with_progress(console: Console, description: str, work: Any) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(description, total=None)
        return work(lambda done, total: bar.update(task, completed=done, total=total))


def start_cmd(puzzle_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Copy the starter into ./perflab-work/ID/fix.py (never overwrites)."""
    from perflab.puzzles.engine import catalog, progress, workspace

    p = catalog.get(puzzle_id)
    path, created = workspace.start(p)
    if created:
        with progress.ProgressDB() as db:
            db.add_event(p.id, "start")
        print(f"wrote {display_path(path)}: edit it, then `perflab check {p.id}`")
    else:
        print(f"{display_path(path)} already exists; left as it is (delete it to start over)")


def check_cmd(puzzle_id: str = typer.Argument(..., metavar="ID"),
              fix: Optional[Path] = typer.Option(None, "--fix", help="default: ./perflab-work/ID/fix.py"),
              seed: Optional[int] = typer.Option(None, "--seed", help="input seed (default: fresh random)"),
              as_json: bool = typer.Option(False, "--json", help="one JSON object (schema perflab.check/1)")) -> None:
    """Check a fix: correct on fresh inputs, faster (95 % CI above the bar), planted finding gone."""
    from rich.text import Text

    from perflab.puzzles.engine import catalog, checker, progress, runner, workspace

    p = catalog.get(puzzle_id)
    device = runner.require_device(p, "perflab check")
    fix_path = workspace.variant_source(p, "mine", fix)
    console = console_()
    out = workspace.new_run_dir(p, "check")
    with console.status(Text(f"checking {display_path(fix_path)}")) as status:
        result = checker.check(p, fix_path, out, device=device, seed=seed,
                               on_phase=lambda name: status.update(Text(f"checking {display_path(fix_path)}: {name}")))
    detail = result.to_dict()
    runner.write_json(out / "check.json", detail)
    with progress.ProgressDB() as db:
        # The timing samples stay in the run folder's check.json, out of the database.
        db.add_event(p.id, "check", ok=result.passed,
                     detail={k: v for k, v in detail.items() if k not in ("slow", "fixed")})
    if as_json:
        print(json.dumps({"schema": "perflab.check/1", **detail}, indent=2))
    else:
        _render_check(console, result)
    if not result.passed:
        fail(1)


def _render_check(console: Console, r: Any) -> None:
    from rich.text import Text

    from perflab.report import summary as render

    def mark(ok: bool) -> tuple[str, str]:
        return ("✓ ", "green") if ok else ("✗ ", "red")

    c = r.correctness
    console.print(Text.assemble(mark(c.ok), f"correct on fresh inputs (seed {c.seed}, {r.device})",
                                f": {c.message}" if c.message else ""))
    if r.speed and "median_ms" not in r.slow:  # a memory metric ([check] metric, puzzles/evidence/memory.py)
        s = r.speed
        metric = s.statistic.split()[0]
        console.print(Text.assemble(mark(s.passed), f"{metric}: slow {render.fmt_num(r.slow.get(metric))} MB, "
                                    f"fix {render.fmt_num(r.fixed.get(metric))} MB, reduction {s.point:.2f}× "
                                    f"(bar {s.bar:.2f}×)"))
    elif r.speed:
        s = r.speed
        label = "bare / profiled step time" if "bare / profiled" in (s.statistic or "") else \
            "speed-up (timed without the profiler)"
        console.print(Text.assemble(mark(s.passed), f"{label} {s.point:.2f}× (95 % CI {s.ci_low:.2f}–{s.ci_high:.2f}, "
                                    f"bar {s.bar:.2f}×; slow {render.fmt_num(r.slow['median_ms'])} ms, "
                                    f"fix {render.fmt_num(r.fixed['median_ms'])} ms, n={s.n})"))
    if r.evidence:
        e = r.evidence
        verdict = "no longer the bottleneck" if e.residue else "gone" if e.ok else "still there"
        if e.what:
            console.print(Text.assemble(mark(e.ok), f"{e.what}: {'yes' if e.ok else 'no'} ({'; '.join(e.found)})"))
        else:
            console.print(Text.assemble(mark(e.ok), f"planted finding {e.planted} {verdict} "
                                        f"(doctor: {', '.join(e.found) or 'nothing'})"))
    console.print(Text("PASS" if r.passed else "FAIL", style="bold green" if r.passed else "bold red"))


def hint_cmd(puzzle_id: str = typer.Argument(..., metavar="ID"),
             n: Optional[int] = typer.Argument(None, help="which hint (default: the next one)")) -> None:
    """Hints in order, from the timeline to the cause."""
    from perflab.puzzles.engine import catalog, progress

    p = catalog.get(puzzle_id)
    if not p.hints:
        raise PerflabError(f"{p.id} has no hints")
    with progress.ProgressDB() as db:
        seen = db.hints_seen(p.id)
        k = n if n is not None else min(seen + 1, len(p.hints))
        if not 1 <= k <= len(p.hints):
            raise PerflabError(f"{p.id} has hints 1..{len(p.hints)}")
        db.add_event(p.id, "hint", str(k))
    print(f"hint {k}/{len(p.hints)}: {openable(p, p.hints[k - 1].strip())}")
    if n is None and seen >= len(p.hints):
        print("(that is the last hint; `perflab solution` shows the fix)")


def solution_cmd(puzzle_id: str = typer.Argument(..., metavar="ID"),
                 yes: bool = typer.Option(False, "--yes", "-y", help="do not ask before spoiling")) -> None:
    """Print the solution (asks first)."""
    from perflab.puzzles.engine import catalog, progress

    p = catalog.get(puzzle_id)
    if not yes and not confirm(f"Show the solution of {p.id}? It spoils the puzzle"):
        print("not shown")
        return
    with progress.ProgressDB() as db:
        db.add_event(p.id, "solution")
    print(f"# {display_path(p.file('solution'))}")
    print(p.file("solution").read_text(encoding="utf-8"), end="")


def register(app: typer.Typer) -> None:
    from perflab.cli import answer
    from perflab.cli import progress as progress_cli

    app.command("list")(list_cmd)
    app.command("show")(show_cmd)
    app.command("run")(run_cmd)
    app.command("start")(start_cmd)
    app.command("answer")(answer.answer_cmd)
    app.command("check")(check_cmd)
    app.command("hint")(hint_cmd)
    app.command("solution")(solution_cmd)
    app.command("progress")(progress_cli.progress_cmd)
