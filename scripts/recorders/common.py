"""What the recorders share: this tree's perflab, a work folder with a time budget and a log of its steps,
the machine's description, and packing for the trip back from the GPU machine.

A GPU machine returns only a few files from its output folder, none deeper than two folders, 16 MB each:
`Session.give_back(DIR)` packs the work folder into DIR/<name>.tgz (in parts of 15 MB when larger).
"""
from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))   # this tree's code and catalog, ahead of any installed perflab

PART_BYTES = 15_000_000
NOISE = ("USDT",)   # lines a GPU machine's Python prints on every start


def child_env(**extra: object) -> dict[str, str]:
    """A child process's environment: this tree's perflab first, NVLink multicast off (NCCL_NVLS_ENABLE=0, what
    the GPU machines need), Python's output unbuffered; `extra` on top."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def perflab(*args: object) -> list[str]:
    """The perflab command of this tree (no `perflab` on PATH needed)."""
    return [sys.executable, "-m", "perflab", *map(str, args)]


def record_py(*args: object) -> list[str]:
    """This tool again, as a child process."""
    return [sys.executable, str(REPO / "scripts" / "record.py"), *map(str, args)]


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def gpu_tag() -> str:
    """The GPU's model in a file name: h100, h200, a100, ... (gpu when none is named)."""
    import re

    import torch

    found = re.search(r"\b([A-Z]{1,3}\d{1,4})\b", torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None
    return found.group(1).lower() if found else "gpu"


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


class Session:
    """One recording's work folder, its time budget (what the packing needs kept aside) and steps.log."""

    def __init__(self, folder: Path, budget_s: float, reserve_s: float = 10.0):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.budget_s, self.reserve_s = budget_s, reserve_s
        self.start = time.monotonic()

    def left(self) -> float:
        """Seconds left before the packing must start."""
        return self.start + self.budget_s - self.reserve_s - time.monotonic()

    def limit(self, want: float) -> float:
        """A step's time limit: what it wants, or what is left if less (at least 1 s)."""
        return max(1.0, min(want, self.left()))

    def log(self, message: str) -> None:
        line = f"== {time.strftime('%H:%M:%S', time.gmtime())} +{time.monotonic() - self.start:.0f}s {message}"
        print(line, flush=True)
        with (self.folder / "steps.log").open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def run(self, cmd: list[str], log: str, want_s: float, tail: int = 15, env: dict | None = None,
            cwd: Path = REPO, stdout: str | None = None) -> int:
        """cmd under a time limit (`want_s`, at most what is left), its output into `log` (in the folder, the
        machine's noise lines dropped; its standard output into the file `stdout` instead, if named) and its last
        `tail` lines printed. Returns its exit status, 124 when the limit ended it (the whole process group:
        torchrun's workers too)."""
        return run_logged(cmd, self.folder / log, self.limit(want_s), tail=tail, env=env, cwd=cwd,
                          stdout=self.folder / stdout if stdout else None)

    def give_back(self, dest: Path | None) -> list[Path]:
        """The folder packed as dest/<folder name>.tgz (in 15 MB parts when larger); nothing without dest."""
        if dest is None:
            print(f"results in {self.folder}", flush=True)
            return []
        return pack(self.folder, Path(dest))


def run_logged(cmd: list[str], log: Path, limit_s: float, tail: int = 15, env: dict | None = None,
               cwd: Path = REPO, stdout: Path | None = None) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as out, (stdout.open("w", encoding="utf-8") if stdout else out) as std:
        out.write("$ " + " ".join(map(str, cmd)) + "\n")
        out.flush()
        try:
            proc = subprocess.Popen(list(map(str, cmd)), stdout=std, stderr=out if stdout else subprocess.STDOUT,
                                    cwd=cwd, env=env or child_env(), start_new_session=True)
        except OSError as exc:
            out.write(f"could not start: {exc}\n")
            rc = 127
        else:
            try:
                rc = proc.wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = 124
        out.write(f"exit {rc}\n")
    lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines()
             if not any(n in ln for n in NOISE)]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if tail > 0:
        print("\n".join(lines[-tail:]), flush=True)
    return rc


def describe_machine(path: Path, topology: bool = False) -> None:
    """The GPUs, driver, clocks and versions into `path`; with `topology`, how the GPUs are linked and the NCCL
    environment too. A command that is missing or fails says so in the file."""
    commands = [["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm", "--format=csv"]]
    if topology:
        commands += [["nvidia-smi", "-L"], ["nvidia-smi", "topo", "-m"], ["nvidia-smi", "nvlink", "-s"]]
    versions = ("import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', "
                "torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None)")
    commands.append([sys.executable, "-c", versions])
    with Path(path).open("w", encoding="utf-8") as out:
        out.write(f"date {now()}\n")
        for cmd in commands:
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
                out.write(p.stdout + p.stderr)
            except (OSError, subprocess.TimeoutExpired) as exc:
                out.write(f"{' '.join(cmd)}: {exc}\n")
        if topology:
            out.writelines(f"{k}={v}\n" for k, v in sorted(os.environ.items()) if k.startswith("NCCL_"))


def pack(folder: Path, dest: Path) -> list[Path]:
    """folder as dest/<name>.tgz, split into .part00, .part01, ... of 15 MB when larger (`cat` joins them)."""
    dest.mkdir(parents=True, exist_ok=True)
    tgz = dest / f"{folder.name}.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    if tgz.stat().st_size <= PART_BYTES:
        print(f"packed {tgz} ({tgz.stat().st_size >> 10} KiB)", flush=True)
        return [tgz]
    parts = []
    with tgz.open("rb") as src:
        while chunk := src.read(PART_BYTES):
            part = dest / f"{tgz.name}.part{len(parts):02d}"
            part.write_bytes(chunk)
            parts.append(part)
    tgz.unlink()
    print(f"packed {folder.name} in {len(parts)} parts: cat {folder.name}.tgz.part* > {folder.name}.tgz", flush=True)
    return parts


def work_folder(name: str) -> Path:
    """Where a recorder works: a new folder <name> (the name it comes back under) in a temporary folder of its own,
    with room beside it for what is not packed (scratch)."""
    folder = Path(tempfile.mkdtemp(prefix="perflab-record-")) / name
    folder.mkdir()
    return folder


def scratch(run: Session, name: str) -> Path:
    """A folder beside the work folder: written by a step, not packed."""
    return run.folder.parent / name
