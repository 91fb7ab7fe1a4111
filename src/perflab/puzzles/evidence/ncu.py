"""Nsight Compute evidence for puzzles with `tools = ["ncu"]`: record, read, and check it.

Per variant a recording holds `<variant>.ncu-rep.gz` (open it in Nsight Compute's UI) and
`<variant>.csv.gz` (its raw page, `ncu --import ... --page raw --csv`: what replay and the questions
read on a machine without ncu). The profiled program is perflab.puzzles.evidence.ncu_target: the variant's
setup, `[ncu] warmup` unprofiled steps, then one step between cudaProfilerStart/Stop; `[ncu] kernel`
(a regex) and `launches` pick its kernels. Clocks are never touched (--clock-control none).

The fix check of such a puzzle re-profiles the fix the same way: the planted finding must be gone
from the doctor's ncu report (not high or medium), as for torch-profiler puzzles it must be gone
from the trace. A puzzle whose planted finding is a trace finding that the ncu reports explain
(`[check] planted_in = "trace"`, e.g. below-roof) records them as evidence only; its fix is judged
by the re-profiled trace.
"""
from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.paths import child_env
from perflab.puzzles.engine import checker, replay
from perflab.puzzles.engine.kinds import Checking, Kind, Recording, register
from perflab.puzzles.engine.spec import Puzzle, display_path

NCU_TIMEOUT_S = 300
BLOCKING_SEVERITIES = ("high", "medium")


class NcuEvidenceError(PerflabError):
    """Nsight Compute could not produce a report for a puzzle variant."""


def uses_ncu(puzzle: Puzzle) -> bool:
    return "ncu" in puzzle.tools


def rep_file(folder: Path, variant: str) -> Path:
    return Path(folder) / f"{variant}.ncu-rep.gz"


def csv_file(folder: Path, variant: str) -> Path:
    return Path(folder) / f"{variant}.csv.gz"


def has(folder: Path, variant: str) -> bool:
    return csv_file(folder, variant).is_file()


@lru_cache(maxsize=4)
def _metrics(ncu: str) -> tuple[str, ...]:
    """The extra metrics the doctor's rules read, filtered against this ncu (queried once per process)."""
    from perflab.toolkit.ncu_runner import (
        EXTRA_METRICS,
        available_metrics,
        filter_metrics,
    )

    return tuple(filter_metrics(EXTRA_METRICS, available_metrics(Path(ncu))))


def target_command(puzzle: Puzzle, source: Path, device: str, seed: int) -> list[str]:
    return [sys.executable, "-m", "perflab.puzzles.evidence.ncu_target", str(Path(source).resolve()), "--device", device,
            "--seed", str(seed), "--warmup", str(puzzle.ncu.warmup)]


def ncu_command(puzzle: Puzzle, ncu: Path, out_base: Path, program: list[str], metrics: list[str]) -> list[str]:
    """ncu_runner's command (clock control off, section set, launch count, kernel regex), profiling only
    between cudaProfilerStart and Stop."""
    from perflab.toolkit.ncu_runner import build_command

    opts = build_command(ncu, out_base, [], kernel=puzzle.ncu.kernel or None, section_set=puzzle.ncu.set,
                         launch_count=puzzle.ncu.launches, metrics=metrics, nvtx=puzzle.ncu.nvtx)
    return opts + ["--profile-from-start", "off"] + program


def _gzip(src: Path, dest: Path) -> None:
    with open(src, "rb") as fin, gzip.open(dest, "wb", compresslevel=6) as fout:
        shutil.copyfileobj(fin, fout)


def _why(proc: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if ln.strip()]
    picked = [ln for ln in lines if "ncu_target:" in ln or "==ERROR==" in ln or "==WARNING==" in ln]
    return (picked or lines or ["no output"])[-1]


def profile_variant(puzzle: Puzzle, source: Path, out_dir: Path, variant: str, *, device: str = "cuda",
                    seed: int = 0) -> Path:
    """Profile one step of `source` under ncu; writes <variant>.ncu-rep.gz and <variant>.csv.gz into out_dir
    and returns the CSV's path."""
    from perflab.toolkit.ncu_runner import export_csv, find_ncu

    ncu = find_ncu()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir / f"{variant}-ncu-tmp"  # ncu appends .ncu-rep to -o
    report = out_dir / f"{base.name}.ncu-rep"
    program = target_command(puzzle, source, device, seed)
    metrics = list(_metrics(str(ncu)))
    proc = None
    for extra in ([metrics, []] if metrics else [[]]):  # a metric this ncu rejects must not cost the profile
        report.unlink(missing_ok=True)
        try:
            proc = subprocess.run(ncu_command(puzzle, ncu, base, program, extra), check=False, capture_output=True,
                                  text=True,
                                  timeout=NCU_TIMEOUT_S, env=child_env())
        except subprocess.TimeoutExpired:
            raise NcuEvidenceError(f"ncu on {display_path(source)} ran over {NCU_TIMEOUT_S} s") from None
        if report.exists() or "ncu_target:" in (proc.stderr + proc.stdout):
            break
    if not report.exists():
        what = f"kernels matching {puzzle.ncu.kernel!r}" if puzzle.ncu.kernel else "kernels"
        raise NcuEvidenceError(f"ncu recorded no {what} in one step of {display_path(source)}: {_why(proc)}")
    tmp_csv = export_csv(ncu, report, out_dir / f"{base.name}.csv")
    _gzip(report, rep_file(out_dir, variant))
    _gzip(tmp_csv, csv_file(out_dir, variant))
    report.unlink(missing_ok=True)
    tmp_csv.unlink(missing_ok=True)
    return csv_file(out_dir, variant)


def load_profile(folder: Path, variant: str) -> Any:
    from perflab.trace.ncu import load

    path = csv_file(folder, variant)
    if not path.is_file():
        raise PerflabError(f"no recorded {variant} Nsight Compute report at {display_path(path)}: "
                           f"{replay.record_hint(None)}")
    return load(path)


def diagnose(profile: Any) -> Any:
    from perflab.doctor.ncu import diagnose_profile

    return diagnose_profile(profile)


def planted_still_there(puzzle: Puzzle, report: Any) -> list[Any]:
    return [f for f in report.findings if f.id == puzzle.check.planted and f.severity in BLOCKING_SEVERITIES]


def planted_evidence(puzzle: Puzzle, fix_path: Path, out_dir: Path, *, device: str, seed: int = 0) -> Any:
    """The fix under ncu: the doctor's ncu report must not hold the planted finding as high or medium."""
    csv = profile_variant(puzzle, fix_path, out_dir, "mine", device=device, seed=seed)
    report = diagnose(load_profile(out_dir, "mine"))
    found = [f"{f.id} ({f.severity})" for f in report.findings]
    return checker.Evidence(ok=not planted_still_there(puzzle, report), planted=puzzle.check.planted, found=found,
                    trace=str(csv))


def copy_recording(src: Path, dest: Path, variant: str, as_variant: str | None = None) -> None:
    """Copy a variant's two ncu files from a work folder into an artifacts folder."""
    name = as_variant or variant
    for fn in (rep_file, csv_file):
        shutil.copyfile(fn(src, variant), fn(dest, name))


@register
class Ncu(Kind):
    """tools = ["ncu"]: one step of each recorded variant under Nsight Compute; the fix's kernels judged by it."""
    name = "ncu"
    priority = 10
    tools = ("ncu",)

    def record(self, rec: Recording) -> list[Path]:
        checked = Path(rec.workdir) / "check-solution"  # the solution's check profiled it already: reuse that
        out = []
        for variant in replay.recorded_variants(rec.puzzle):
            folder = rec.folder(variant)
            if variant == "solution" and has(checked, "mine"):
                copy_recording(checked, folder, "mine", variant)
            else:
                profile_variant(rec.puzzle, rec.puzzle.file(variant), folder, variant, device=rec.device)
            out += [rep_file(folder, variant), csv_file(folder, variant)]
        return out

    def confirm(self, chk: Checking) -> Any:
        if chk.puzzle.check.planted_in != "ncu":   # a trace finding whose cause ncu shows: the re-profile judges
            return None
        chk.phase("ncu")
        return planted_evidence(chk.puzzle, chk.fix_path, chk.out_dir, device=chk.device, seed=chk.seed)

    def replay(self, ev: Any, variant: str = "slow") -> Any:
        return load_profile(ev.folder, variant)
