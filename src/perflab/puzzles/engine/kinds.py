"""Evidence kinds: the one interface between the engine and what a puzzle records, checks and replays.

A kind is a module of perflab.puzzles.evidence holding a subclass of `Kind` registered with `@register`;
it overrides the hooks it takes part in (a hook that answers None, or [], is not this kind's). The engine
names no kind: `kinds_for(puzzle)` imports every module of the evidence package once (discovery) and
returns the kinds whose `applies(puzzle)` holds, highest `priority` first. Per hook:

- record: `run` profiles one variant (the first answer wins: multi-rank's N processes before the trace's
  one); `verify` profiles and checks in one go (multi-rank; else the engine's own runs and checks);
  `profile` adds to the variants' profiles before the checks (memory snapshots); `record`, once the
  checks pass, writes the files this kind ships into the artifacts (every kind's, in order); `manifest`
  describes the machine (the first answer, else runner.environment).
- check: `check` runs the whole fix check its own way (multi-rank); after correct outputs, `measure`
  judges the fix (memory, profiler overhead; the trace's timing and re-profile last); `confirm`
  replaces the evidence of a fix fast enough (Nsight Compute).
- replay: `replay(ev, variant)` reads the kind's recorded artifact of a variant back (what its questions read).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from perflab.puzzles.engine.plugins import discover

PACKAGE = "perflab.puzzles.evidence"   # where the kinds live: imported by discovery, never a kind by name

_KINDS: dict[str, Kind] = {}


@dataclass
class Recording:
    """What `verify`, `profile` and `record` get: the puzzle, where to work, and the profiles so far."""
    puzzle: Any
    workdir: Path
    device: str
    command: str
    seed: int | None = None
    profiled: dict[str, Any] = field(default_factory=dict)   # per variant: the numbers measurements.json keeps

    def folder(self, name: str) -> Path:
        path = Path(self.workdir) / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def per_variant(self, record_variant: Callable[..., Path], folder: str | None = None) -> list[Path]:
        """`record_variant(puzzle, source, out_dir, variant, device=)` for slow and solution: the files written."""
        return [record_variant(self.puzzle, self.puzzle.file(v), self.folder(folder or v), v, device=self.device)
                for v in ("slow", "solution")]


@dataclass
class Checking:
    """What `check`, `measure` and `confirm` get: the fix check so far (checker.check fills it in)."""
    puzzle: Any
    fix_path: Path
    out_dir: Path
    device: str
    seed: int
    reps: int
    phase: Callable[[str], None]
    ref: Any = None          # the slow workload's module and state
    ref_state: Any = None
    fix: Any = None          # the fix's module and state
    fix_state: Any = None
    result: Any = None       # the checker.CheckResult, correct outputs established


class Kind:
    name = ""
    priority = 0
    tools: tuple[str, ...] = ()   # puzzle.toml `tools` that call for this kind (or override `applies`)

    def applies(self, puzzle: Any) -> bool:
        return any(t in puzzle.tools for t in self.tools)

    def run(self, puzzle: Any, source: Path, variant: str, out_dir: Path, *, device: str, command: str,
            steps: int | None, seed: int, on_step: Any) -> Any:
        return None

    def verify(self, rec: Recording) -> Any:
        return None

    def profile(self, rec: Recording) -> list[Path]:
        return []

    def record(self, rec: Recording) -> list[Path]:
        return []

    def manifest(self, puzzle: Any, command: str, device: str) -> dict[str, Any] | None:
        return None

    def check(self, chk: Checking) -> Any:
        return None

    def measure(self, chk: Checking) -> Any:
        return None

    def confirm(self, chk: Checking) -> Any:
        return None

    def replay(self, ev: Any, variant: str = "slow") -> Any:
        return None


def register(cls: type[Kind]) -> type[Kind]:
    """Class decorator: one instance of the kind joins the registry under its `name`."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    _KINDS[cls.name] = cls()
    return cls


def registered() -> dict[str, Kind]:
    discover(PACKAGE)
    return dict(_KINDS)


def kind(name: str) -> Kind:
    return registered()[name]


def kinds_for(puzzle: Any) -> list[Kind]:
    return sorted((k for k in registered().values() if k.applies(puzzle)), key=lambda k: (-k.priority, k.name))


def first(puzzle: Any, hook: str, *args: Any, **kwargs: Any) -> Any:
    """The first answer (not None) of the puzzle's kinds to `hook`, or None."""
    for k in kinds_for(puzzle):
        got = getattr(k, hook)(*args, **kwargs)
        if got is not None:
            return got
    return None


def every(puzzle: Any, hook: str, *args: Any, **kwargs: Any) -> list[Any]:
    """Every kind's answer to a hook that returns a list, joined in order."""
    return [item for k in kinds_for(puzzle) for item in getattr(k, hook)(*args, **kwargs)]
