"""perflab answer ID: the diagnosis questions, graded against values computed from the recorded evidence.

A wrong answer says where to look (the evidence's source and the names of the numbers that decide it,
never their values) and lets the learner try again; `--reveal KEY` shows the value and its evidence,
and progress records that it was revealed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional

import typer

from perflab.cli.common import console as make_console
from perflab.cli.common import fail, openable
from perflab.errors import PerflabError

if TYPE_CHECKING:  # the command imports what it runs when it runs (perflab --help stays light)
    from rich.console import Console

    from perflab.puzzles import questions
    from perflab.puzzles.engine.spec import Puzzle

ALL = "all"


def _parse_answers(p: Puzzle, pairs: List[str]) -> dict[str, str]:
    from perflab.puzzles import questions

    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise PerflabError(f"--answer {pair!r} must be KEY=VALUE (keys: {', '.join(p.question_keys)})")
        questions.normalize(p.find_question(key.strip()), value)  # unknown key or bad value: exit 2 before grading
        out[key.strip()] = value
    return out


def _reveal_keys(p: Puzzle, keys: List[str]) -> list[str]:
    if ALL in keys:
        return list(p.question_keys)
    for key in keys:
        p.find_question(key)  # an unknown key: exit 2
    return [k for k in p.question_keys if k in keys]


def _ask(console: Console, q: Any, again: bool, started: bool) -> str | None:
    """The learner's answer; '' when they skip (Enter), None at the end of input once answering started."""
    from rich.prompt import Prompt
    from rich.text import Text

    prompt = Text.assemble((q.key, "bold"), f": {q.prompt}", " (again, or Enter to skip)" if again else "")
    try:
        return Prompt.ask(prompt, choices=list(q.choices) or None, console=console, default="",
                          show_default=False, show_choices=bool(q.choices))
    except EOFError:
        if again or started:
            return None
        raise PerflabError("no answer on stdin: give answers with --answer KEY=VALUE") from None


def answer_cmd(puzzle_id: str = typer.Argument(..., metavar="ID"),
               answer: Optional[List[str]] = typer.Option(None, "--answer", "-a",
                                                          help="KEY=VALUE (repeatable); without it, asks"),
               reveal: Optional[List[str]] = typer.Option(None, "--reveal", metavar="KEY",
                                                          help="show the computed value of KEY (repeatable, or "
                                                               "'all'); progress records it as revealed")) -> None:
    """Answer the diagnosis questions; graded against values computed from the recorded evidence."""
    from perflab.puzzles.engine import catalog, replay

    p = catalog.get(puzzle_id)
    if not p.questions:
        raise PerflabError(f"{p.id} has no diagnosis questions")
    given = _parse_answers(p, answer or [])
    shown = _reveal_keys(p, reveal or [])
    ev = replay.recording(p)
    console = make_console()
    right, asked = 0, 0
    if given or not shown:
        right, asked = (_grade_given if given else _ask_each)(console, p, ev, given)
        console.print(f"{right}/{asked} right (graded against the recording made on "
                      f"{ev.manifest().get('gpu') or 'the recording GPU'})")
    for key in shown:
        _reveal(console, p, ev, key)
    if right < asked:
        fail(1)


def _grade_given(console: Console, p: Puzzle, ev: Any, given: dict[str, str]) -> tuple[int, int]:
    from perflab.puzzles import questions

    grades = [questions.grade(q, given[q.key], _compute(q, ev)) for q in p.questions if q.key in given]
    _record(p, grades)
    how = True
    for g in grades:
        _render_grade(console, p, g, interactive=False, how=how)
        how = how and g.correct  # the puzzle's "how" once, under the first wrong answer
    return sum(g.correct for g in grades), len(grades)


def _ask_each(console: Console, p: Puzzle, ev: Any, _given: dict[str, str]) -> tuple[int, int]:
    from perflab.puzzles import questions

    right, started, how = 0, False, True
    for q in p.questions:
        computed = _compute(q, ev)
        again = False
        while True:
            raw = _ask(console, q, again, started)
            started = True
            if not raw:  # skipped, or no more input
                console.print(f"  skipped; `perflab answer {p.id} --reveal {q.key}` shows the value", style="dim")
                break
            try:
                g = questions.grade(q, raw, computed)
            except PerflabError as exc:
                console.print(str(exc), style="red")
                continue
            _record(p, [g])
            _render_grade(console, p, g, interactive=True, how=how)
            how = how and g.correct
            if g.correct:
                right += 1
                break
            again = True
        if raw is None:
            break
    return right, len(p.questions)


def _compute(q: Any, ev: Any) -> questions.Computed:
    """The question's computed value, from the evidence cache when this recording was graded before."""
    import json

    from perflab.puzzles import questions
    from perflab.puzzles.engine.evidence_cache import cached

    def make() -> dict[str, Any]:
        c = questions.compute(q, ev)
        return {"value": c.value, "evidence": c.evidence, "source": c.source, "alternatives": list(c.alternatives)}

    what = f"question|{q.analysis}|{json.dumps(q.args, sort_keys=True, default=str)}"
    d = cached(what, [ev.folder], make)
    return questions.Computed(d["value"], d["evidence"], d["source"], tuple(d["alternatives"]))


def _record(p: Puzzle, grades: list) -> None:
    from perflab.puzzles.engine import progress

    with progress.ProgressDB() as db:
        for g in grades:
            db.add_event(p.id, "answer", g.key, g.given, g.correct)


def _render_grade(console: Console, p: Puzzle, g: questions.Grade, *, interactive: bool, how: bool = True) -> None:
    from rich.text import Text

    from perflab.report import summary as render

    if g.correct:
        expected = render.short(render.fmt_num(g.expected))
        console.print(Text.assemble(("✓ ", "green"), f"{g.key}: {g.given}  (computed: {expected} from "
                                                      f"{g.computed.source})"))
        return
    console.print(Text.assemble(("✗ ", "red"), f"{g.key}: {g.given} is not what the evidence says"))
    for line in where_to_look(p, g, how=how):
        console.print(Text("  " + line), soft_wrap=True)
    if not interactive:  # commands to copy: never broken across lines
        console.print(Text(f"  try again: perflab answer {p.id} -a {g.key}=VALUE · a hint: perflab hint {p.id} · "
                           f"the value: perflab answer {p.id} --reveal {g.key}", style="dim"), soft_wrap=True)


def where_to_look(p: Puzzle, g: questions.Grade, *, how: bool = True) -> list[str]:
    """Where the deciding numbers are and what they are called; never their values. `how` (the puzzle's advice,
    the same for every question) is shown once, under the first wrong answer."""
    lines = [f"look at {g.computed.source}: {', '.join(g.computed.evidence)}"]
    if g.note:
        lines.append(g.note)
    if how and p.look_at.strip():
        lines.append(f"how: {openable(p, ' '.join(p.look_at.split()))}")
    return lines


def _reveal(console: Console, p: Puzzle, ev: Any, key: str) -> None:
    from rich.text import Text

    from perflab.puzzles import questions
    from perflab.puzzles.engine import progress
    from perflab.report import summary as render

    computed = _compute(p.find_question(key), ev)
    with progress.ProgressDB() as db:
        db.add_event(p.id, "reveal", key)
    console.print(Text.assemble(("revealed ", "yellow"), f"{key}: {render.short(render.fmt_num(computed.value))}"))
    console.print(render.evidence_table(computed.evidence, computed.source))
