"""Run a program under Nsight Compute with perflab's defaults and export the raw page as CSV.

Defaults: `--clock-control none` always (the card's clocks are never touched), `--set full`, a few
launches of the chosen kernels, NVTX capture (the doctor reads GEMM shapes from NVTX ranges), plus
the extra metrics the doctor's rules and the roofline need, filtered against what this ncu offers.
The set "doctor" collects only what the kernel doctor reads (toolkit/ncu_metrics.py): fewer replays.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from perflab.errors import PerflabError
from perflab.toolkit.ncu_metrics import DOCTOR_SECTIONS, DOCTOR_SET, EXTRA_METRICS, doctor_metrics
from perflab.trace.nsight_compute.ncu_tool import export_csv, find_ncu, last_line


@dataclass
class NcuRun:
    report: Path
    csv: Path | None
    command: list[str]


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names from `ncu --query-metrics` output (first column of each metric line)."""
    names = set()
    for line in text.splitlines():
        m = re.match(r"\s*([a-z0-9]+__[A-Za-z0-9_]+)\s", line)
        if m:
            names.add(m.group(1))
    return names


def _metrics_cache(ncu: Path) -> Path | None:
    """Where this ncu's metric names are kept (keyed by its path, size and time), or None."""
    import hashlib

    from perflab.paths import cache_dir

    try:
        real = ncu.resolve()
        st = real.stat()
        return cache_dir("ncu-metrics") / (hashlib.sha256(f"{real}|{st.st_size}|{st.st_mtime_ns}".encode())
                                           .hexdigest()[:20] + ".txt")
    except OSError:
        return None


def available_metrics(ncu: Path) -> set[str] | None:
    """The base metric names this ncu offers (`ncu --query-metrics` takes seconds: kept in perflab's cache)."""
    cache = _metrics_cache(ncu)
    if cache is not None and cache.is_file():
        names = set(cache.read_text().split())
        if names:
            return names
    try:
        proc = subprocess.run([str(ncu), "--query-metrics"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = parse_query_metrics(proc.stdout)
    if names and cache is not None:
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text("\n".join(sorted(names)))
        os.replace(tmp, cache)
    return names or None


def filter_metrics(metrics: tuple[str, ...], available: set[str] | None) -> list[str]:
    """Keep the metrics whose base name this ncu knows (all of them when the query failed)."""
    if available is None:
        return list(metrics)
    return [m for m in metrics if m.split(".", 1)[0] in available]


def build_command(ncu: Path, out_base: Path, program: list[str], *, kernel: str | None = None,
                  section_set: str = "full", launch_count: int = 3, launch_skip: int = 0,
                  metrics: list[str] | None = None, nvtx: bool = True, kill: bool = False) -> list[str]:
    """The ncu command line; `kill`: stop the program once the launches are profiled (`--kill yes`);
    section_set "doctor": the sections the kernel doctor reads (with its metrics in `metrics`), else an ncu set."""
    sets = ([a for s in DOCTOR_SECTIONS for a in ("--section", s)] if section_set == DOCTOR_SET
            else ["--set", section_set])
    cmd = [str(ncu), "--clock-control", "none", *sets, "--target-processes", "all",
           "--launch-count", str(launch_count), "-f", "-o", str(out_base)]
    if kill:
        cmd += ["--kill", "yes"]
    if launch_skip:
        cmd += ["--launch-skip", str(launch_skip)]
    if kernel:
        cmd += ["--kernel-name", f"regex:{kernel}"]
    if nvtx:
        cmd += ["--nvtx"]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    return cmd + list(program)


def profile(program: list[str], *, out_dir: Path, name: str | None = None, kernel: str | None = None,
            section_set: str = "full", launch_count: int = 3, launch_skip: int = 0,
            extra_metrics: bool = True, force: bool = False, kill: bool = False) -> NcuRun:
    """Profile `program` (argv list) under ncu; returns the .ncu-rep and its raw-page CSV. An existing
    report or CSV of the same name is replaced only with force."""
    from perflab.outputs import check_output, check_parent

    if not program:
        raise PerflabError("nothing to profile: give the program after `--`, e.g. perflab ncu -- python script.py")
    name = name or re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(program[-1] if len(program) > 1 else program[0]).stem) or "profile"
    out_base = out_dir / name
    if not out_dir.is_dir():
        check_parent(out_dir)  # the folder itself is made for the reports; the one it goes in must exist
    for path in (out_base.with_suffix(".ncu-rep"), out_base.with_suffix(".csv")):
        check_output(path, force=force, inputs=[a for a in program if Path(a).is_file()], make_parents=True)
    ncu = find_ncu()
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = doctor_metrics() if section_set == DOCTOR_SET else EXTRA_METRICS
    metrics = filter_metrics(wanted, available_metrics(ncu)) if extra_metrics else []
    cmd = build_command(ncu, out_base, program, kernel=kernel, section_set=section_set,
                        launch_count=launch_count, launch_skip=launch_skip, metrics=metrics, kill=kill)
    report = out_base.with_suffix(".ncu-rep")
    report.unlink(missing_ok=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if not report.exists() and metrics:  # an extra metric this ncu rejects must not cost the profile
        cmd = build_command(ncu, out_base, program, kernel=kernel, section_set=section_set,
                            launch_count=launch_count, launch_skip=launch_skip, metrics=None, kill=kill)
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if not report.exists():
        errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "==ERROR==" in ln or "==WARNING==" in ln]
        raise PerflabError(f"ncu wrote no report (exit {proc.returncode}): "
                           f"{last_line(chr(10).join(errors) or proc.stderr or proc.stdout)}")
    csv_path = export_csv(ncu, report, out_base.with_suffix(".csv"))
    return NcuRun(report=report, csv=csv_path, command=cmd)
