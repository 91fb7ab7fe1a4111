"""Before and after (tools = ["diff"]): `before.py` in the puzzle folder (the same workload before the change)
profiled as `before.trace.json.gz`, what `perflab diff` compares with the slow trace."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from perflab.puzzles.engine import runner
from perflab.puzzles.engine.kinds import Kind, Recording, register

BEFORE = "before"


@register
class Diff(Kind):
    name = "diff"
    tools = ("diff",)

    def record(self, rec: Recording) -> list[Path]:
        puzzle = rec.puzzle
        res = runner.run_variant(puzzle, puzzle.folder / f"{BEFORE}.py", BEFORE, rec.folder("extras") / BEFORE,
                                 device=rec.device, command=f"perflab run {puzzle.id} (before.py)")
        return [res.trace]

    def replay(self, ev: Any, variant: str = BEFORE) -> Path:
        return ev.trace_path(variant)
