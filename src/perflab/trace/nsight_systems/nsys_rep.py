"""An Nsight Systems report (.nsys-rep, or .qdrep before 2021.4) read through its SQLite export.

Nothing but nsys reads the report format, so perflab asks nsys for the documented export:
`nsys export --type sqlite`. The export goes into perflab's cache (keyed by the report's path, size
and modification time), never next to the user's file; without nsys on PATH the error gives the exact
command to run instead.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from perflab.errors import PerflabError, UnreadableInput

EXPORT_TIMEOUT_S = 3600


def export_command(nsys: str, report: Path, output: Path) -> list[str]:
    return [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(output), str(report)]


def cache_dir() -> Path:
    from perflab.paths import cache_dir as perflab_cache

    return perflab_cache("nsys-exports")


def cached_export(report: Path) -> Path:
    """Where the export of this version of the report lives in the cache."""
    st = report.stat()
    key = hashlib.sha256(f"{report.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:20]
    return cache_dir() / f"{report.stem}-{key}.sqlite"


def sqlite_for(report: str | Path) -> Path:
    """The SQLite export of an Nsight Systems report, made by `nsys export` on first use."""
    report = Path(report)
    if not report.is_file():
        raise UnreadableInput(f"{report}: no such file")
    nsys = shutil.which("nsys")
    if nsys is None:
        suggested = report.with_suffix(".sqlite")
        cmd = shlex.join(["nsys", "export", "--type", "sqlite", "--output", str(suggested), str(report)])
        raise PerflabError(f"{report} is an Nsight Systems report and nsys is not on PATH: run `{cmd}` where "
                           f"Nsight Systems is installed, then give perflab {suggested.name}")
    out = cached_export(report)
    if out.is_file():
        return out
    partial = out.with_name(out.stem + f".partial-{os.getpid()}.sqlite")
    try:
        done = subprocess.run(export_command(nsys, report, partial), capture_output=True, text=True,
                              timeout=EXPORT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        partial.unlink(missing_ok=True)
        raise PerflabError(f"{report}: `nsys export` failed ({exc})") from None
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        last = (done.stderr or done.stdout or "").strip().splitlines()
        why = last[-1][:300] if last else f"exit code {done.returncode}"
        raise PerflabError(f"{report}: `nsys export --type sqlite` failed: {why}")
    partial.replace(out)
    return out
