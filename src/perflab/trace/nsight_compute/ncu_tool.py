"""Nsight Compute's command-line tool as the reader needs it: where ncu is, and a report's raw page as CSV
(how a `.ncu-rep` is read where the ncu_report module is missing; toolkit/ncu_runner.py runs profiles with it)."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

from perflab.errors import PerflabError

NCU_GLOBS = ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/bin/ncu", "/usr/local/NVIDIA-Nsight-Compute*/ncu")


def _version_key(path: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[./-]", path))


def find_ncu() -> Path:
    """ncu on PATH, else the newest under /opt/nvidia/nsight-compute/*/; one-line error if absent."""
    found = shutil.which("ncu")
    if found:
        return Path(found)
    for pattern in NCU_GLOBS:
        hits = sorted((h for h in glob.glob(pattern) if os.access(h, os.X_OK)), key=_version_key)
        if hits:
            return Path(hits[-1])
    raise PerflabError("Nsight Compute (ncu) not found on PATH or under /opt/nvidia/nsight-compute/*/: "
                       "install Nsight Compute or add its folder to PATH")


def export_csv_command(ncu: Path, report: Path) -> list[str]:
    return [str(ncu), "--import", str(report), "--page", "raw", "--csv"]


def export_csv(ncu: Path, report: Path, csv_path: Path) -> Path:
    proc = subprocess.run(export_csv_command(ncu, report), capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise PerflabError(f"ncu could not export {report} as CSV: {last_line(proc.stderr or proc.stdout)}")
    from perflab.outputs import write_output

    return write_output(csv_path, proc.stdout, force=True)  # beside the report the caller already checked


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"
