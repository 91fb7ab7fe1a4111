"""The learner's workspace: ./perflab-work/ID/ with fix.py and runs/<timestamp>-<variant>/."""
from __future__ import annotations

from pathlib import Path

from perflab.errors import PerflabError
from perflab.outputs import check_output, new_folder, write_output
from perflab.paths import workspace_dir
from perflab.puzzles.engine.spec import VARIANT_FILES, Puzzle, display_path


def puzzle_dir(puzzle: Puzzle) -> Path:
    return workspace_dir() / puzzle.id


def fix_path(puzzle: Puzzle) -> Path:
    return puzzle_dir(puzzle) / "fix.py"


def start(puzzle: Puzzle) -> tuple[Path, bool]:
    """Write the starter (engine/starter.py) to fix.py, and the slow workload beside it as workload.py (what a
    solution may import from, and the reference the fix is checked against). Never overwrites either file:
    returns (fix.py, created)."""
    dest = fix_path(puzzle)
    if dest.exists():  # the learner's fix (or a link to it): left as it is
        return dest, False
    reference = dest.with_name(VARIANT_FILES["slow"])
    check_output(dest, make_parents=True)  # a dangling link here is refused, not written through
    if not reference.exists():
        check_output(reference, make_parents=True)
    write_output(dest, puzzle.file("starter").read_bytes(), make_parents=True)
    if not reference.exists():
        write_output(reference, puzzle.file("slow").read_bytes())
    return dest, True


def variant_source(puzzle: Puzzle, variant: str, fix: Path | None = None) -> Path:
    """The file a variant runs: workload.py, solution.py, a stage (<stage>.py), or the learner's fix (`mine`)."""
    if variant == "mine":
        path = fix or fix_path(puzzle)
        if not path.is_file():
            raise PerflabError(f"no fix at {display_path(path)}: run `perflab start {puzzle.id}` first, "
                               "or give --fix PATH")
        return path
    if variant not in ("slow", "solution", "starter", *puzzle.stages):
        raise PerflabError(f"unknown variant {variant!r}: use {', '.join(('slow', 'solution', *puzzle.stages))} or mine")
    return puzzle.file(variant)


def new_run_dir(puzzle: Puzzle, variant: str, now: float | None = None) -> Path:
    """runs/<YYYYmmdd-HHMMSS>[.NNN]-<variant>/ (perflab.outputs.new_folder): names sort by time."""
    return new_folder(puzzle_dir(puzzle) / "runs", variant, now)
