"""The walk as evidence (tools = ["investigate"]): `perflab investigate --marker step` run on each variant.

Recording walks every recorded variant (slow, the stages, solution) top-down with toolkit.investigate, the
program being evidence/marked_steps.py on the variant's file, and ships each folder whole as
`<variant>.investigation/` (investigation.json, the level-1 trace, each ncu run's raw-page CSV and log; not the .ncu-rep itself). Replay
reads a folder back with doctor.investigation.build, the way `perflab doctor FOLDER` does. The fix check stays
the trace's (evidence/trace.py): the walk is what the learner runs, the level-1 trace what decides.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.engine import replay
from perflab.puzzles.engine.kinds import Kind, Recording, register
from perflab.puzzles.engine.spec import display_path

TARGET = "perflab.puzzles.evidence.marked_steps"
STEPS, WARMUP, KERNELS = 5, 3, 1   # a few steps and the one kernel that saves most: the headline's inputs


def folder(artifacts: Path, variant: str) -> Path:
    return Path(artifacts) / f"{variant}.investigation"


def investigate_variant(source: Path, out: Path, device: str) -> Path:
    """Walk one variant into `out` (new); returns `out`. A level that fails is recorded as such in the folder."""
    from perflab.toolkit.investigate import Options, Walk

    opts = Options(steps=STEPS, warmup=WARMUP, kernels=KERNELS, memory="never", marker="step", target=TARGET)
    cmd = [sys.executable, "-m", TARGET, str(Path(source).resolve()), "--device", device,
           "--steps", str(STEPS + WARMUP + 2)]
    Walk(cmd, out, opts).run()
    for rep in out.glob("*.ncu-rep"):   # ~10-20 MB each; the raw-page CSV beside it is what the report reads
        rep.unlink()
    return out


@register
class Investigate(Kind):
    name = "investigate"
    tools = ("investigate",)

    def record(self, rec: Recording) -> list[Path]:
        base = rec.folder("investigate")
        return [investigate_variant(rec.puzzle.file(v), folder(base, v), rec.device)
                for v in replay.recorded_variants(rec.puzzle)]

    def replay(self, ev: Any, variant: str = "slow") -> Any:
        from perflab.doctor.investigation import build

        path = folder(ev.folder, variant)
        if not (path / "investigation.json").is_file():
            raise PerflabError(f"no recorded {variant} investigation at {display_path(path)}: {ev._record_hint()}")
        return build(path)
