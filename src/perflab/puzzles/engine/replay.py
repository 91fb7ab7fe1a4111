"""Recorded evidence: the artifacts of one recording, read lazily and once each.

A recording is a folder with `manifest.json`, `<variant>.trace.json.gz` and `measurements.json`: the
shipped `catalog/NN-slug/artifacts/` (replay) and a learner's `perflab-work/ID/runs/...` alike.
Nothing here imports torch.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.history import trace_file  # noqa: F401 (a recording's trace of a variant: the engine's name for it)
from perflab.puzzles.engine.spec import Puzzle, display_path

RECORDED_VARIANTS = ("slow", "solution")


def recorded_variants(puzzle: Puzzle) -> tuple[str, ...]:
    """What a recording profiles: slow and solution, then the puzzle's `stages` (intermediate fixes) in order."""
    return RECORDED_VARIANTS + puzzle.stages


def ranks_dir(folder: Path, variant: str) -> Path:
    """A multi-GPU recording's folder of per-rank traces (perflab.puzzles.evidence.multirank)."""
    return Path(folder) / f"{variant}.ranks"


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise PerflabError(f"{display_path(path)}: unreadable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise PerflabError(f"{display_path(path)}: expected a JSON object")
    return data


def load_trace(path: Path) -> Any:
    from perflab.trace.kineto import load

    return load(path)


def summarize(trace: Any) -> dict[str, Any]:
    from perflab.analysis.reports.summary import evidence_summary

    return evidence_summary(trace)


def cpu_only(trace: Any) -> bool:
    """A trace with no GPU activity (a profile of device "cpu")."""
    from perflab.analysis.steps.links import gpu_rows

    return gpu_rows(trace).size == 0


def diagnose(trace: Any) -> Any:
    """The doctor's report; for a CPU-only trace (a puzzle run on device "cpu"), the CPU-side rules."""
    from perflab.doctor import diagnose as run_doctor

    report = run_doctor(trace)
    if not report.findings and cpu_only(trace):
        from perflab.doctor.cpu import cpu_report

        return cpu_report(trace, report)
    return report


class Evidence:
    """One recording's artifacts. Each trace is parsed once; summaries and doctor reports are cached."""

    def __init__(self, folder: Path, puzzle_id: str = ""):
        self.folder = Path(folder)
        self.puzzle_id = puzzle_id
        self._traces: dict[str, list[Any]] = {}
        self._summaries: dict[str, dict[str, Any]] = {}
        self._reports: dict[str, Any] = {}

    def manifest(self) -> dict[str, Any]:
        return read_json(self.folder / "manifest.json")

    def measurements(self) -> dict[str, Any]:
        data = read_json(self.folder / "measurements.json")
        if not data:
            raise PerflabError(f"no measurements.json in {display_path(self.folder)}: {self._record_hint()}")
        return data

    def require_json(self, name: str, key: str, what: str, how: str = "") -> dict[str, Any]:
        """A recorded JSON artifact (`name` in the recording) that must have `key`; else a one-line error
        saying what is missing and how to record it (`how`, default: record_hint)."""
        data = read_json(self.folder / name)
        if not data.get(key):
            raise PerflabError(f"no {what} in {display_path(self.folder)}: {how or self._record_hint()}")
        return data

    def has(self, variant: str) -> bool:
        return trace_file(self.folder, variant).is_file() or ranks_dir(self.folder, variant).is_dir()

    def trace_path(self, variant: str) -> Path:
        """The variant's trace file, or its folder of per-rank traces (a multi-GPU puzzle)."""
        path = trace_file(self.folder, variant)
        if not path.is_file() and ranks_dir(self.folder, variant).is_dir():
            return ranks_dir(self.folder, variant)
        if not path.is_file():
            raise PerflabError(f"no recorded {variant} trace at {display_path(path)}: {self._record_hint()}")
        return path

    def trace(self, variant: str) -> Any:
        """The variant's trace; of a multi-GPU recording, rank 0's (all ranks: `ranks`)."""
        return self.ranks(variant)[0]

    def ranks(self, variant: str) -> list[Any]:
        """Every rank's trace, sorted by rank (one for a single-GPU recording)."""
        if variant not in self._traces:
            path = self.trace_path(variant)
            if path.is_dir():
                from perflab.trace.kineto import load_ranks

                self._traces[variant] = load_ranks(path)
            else:
                self._traces[variant] = [load_trace(path)]
        return self._traces[variant]

    def summary(self, variant: str) -> dict[str, Any]:
        if variant not in self._summaries:
            if variant in self._traces:  # parsed already: nothing to save
                self._summaries[variant] = summarize(self.trace(variant))
            else:
                from perflab.puzzles.engine.evidence_cache import cached

                self._summaries[variant] = cached("evidence-summary", [self.trace_path(variant)],
                                                  lambda: summarize(self.trace(variant)))
        return self._summaries[variant]

    def report(self, variant: str, rank: int | None = None) -> Any:
        """The doctor's report (of a multi-GPU recording: rank 0's, or `rank`'s, with every rank loaded)."""
        key = variant if rank is None else f"{variant}@{rank}"
        if key not in self._reports:
            traces = self.ranks(variant)
            if len(traces) > 1 or rank is not None:
                from perflab.doctor import diagnose_trace

                self._reports[key] = diagnose_trace(traces, rank=rank)
            else:
                self._reports[key] = diagnose(traces[0])
        return self._reports[key]

    def _record_hint(self) -> str:
        return record_hint(self.puzzle_id)


def record_hint(puzzle_id: str | None) -> str:
    """What a user can run when a recording lacks a file (the repository's recording scripts are not theirs)."""
    who = puzzle_id or "ID"
    return (f"this recording does not hold it (`perflab list` marks puzzles not recorded yet); on a machine with an "
            f"NVIDIA GPU, `perflab run {who}` profiles the puzzle live")


def is_recorded(puzzle: Puzzle) -> bool:
    """Whether the puzzle ships a recording to replay (its measurements.json)."""
    return (puzzle.artifacts / "measurements.json").is_file()


def recording(puzzle: Puzzle) -> Evidence:
    """The shipped recording of a puzzle (what replay and the questions read)."""
    return Evidence(puzzle.artifacts, puzzle.id)


def _machine(manifest: dict[str, Any]) -> str:
    if manifest.get("gpu"):
        return str(manifest["gpu"])
    return "the CPU" if manifest.get("device") == "cpu" else "an unknown GPU"


def replay_label(manifest: dict[str, Any]) -> str:
    date = str(manifest.get("date") or "an unknown date")[:10]
    return f"REPLAY of a recording made on {_machine(manifest)} on {date}"


def live_label(manifest: dict[str, Any]) -> str:
    return f"LIVE run on {_machine(manifest)} (torch {manifest.get('torch', '?')})"
