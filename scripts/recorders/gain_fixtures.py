#!/usr/bin/env python3
"""Record the gain model's GPU fixtures in one run, on the GPU machine, from the repo root:

    python3 scripts/record.py gain-fixtures OUT [--only NAME ...] [--force] [--dry-run]

Builds the fixtures/kernels/*.cu programs that fixtures/kernels/GAINS names (nvcc, sm_90a), profiles every line
of that table with Nsight Compute (--set full plus the doctor's extra metrics, or the set a `// ncu-set:` line
of NAME.cu names; one launch after the table's skip; --clock-control none: clocks are never touched), records
the allocator history of fixtures/memory/offload_two_streams.py, and writes into OUT:

- NAME.ncu-rep.gz and NAME.csv (the raw page, `ncu --import NAME.ncu-rep --page raw --csv`) per table line;
- offload_two_streams.pickle (torch.cuda.memory._dump_snapshot) and offload_two_streams.memory.json.gz (its
  JSON conversion, what the tests read);
- gains.manifest.json: device, driver, ncu / nvcc / torch / triton / Python versions, date, the command, and
  per recording its status, seconds and the program's last line.

Then: cp OUT/gain_*.ncu-rep.gz OUT/gain_*.csv OUT/gains.manifest.json tests/data/ncu/ and
cp OUT/offload_two_streams.memory.json.gz OUT/gains.manifest.json tests/data/memory/.
The snapshot program runs with memory held short first (the allocator frees the other stream's cache to serve
each layer); where that leaves fewer than MIN_CYCLES segments given back and taken again, it runs again with
--empty-cache, and the manifest says which. --dry-run prints what would run, builds and records nothing.
Exit 0 when every recording was written, 1 when one failed, 2 on bad input.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))  # this tree's code, ahead of any installed wheel

TABLE = REPO / "fixtures" / "kernels" / "GAINS"
KERNELS = REPO / "fixtures" / "kernels"
SNAPSHOT_PROGRAM = REPO / "fixtures" / "memory" / "offload_two_streams.py"
SNAPSHOT = "offload_two_streams"
MIN_CYCLES = 16
TIMEOUT_S = 150


@dataclass
class Recording:
    name: str
    expected: str
    kernel: str
    skip: int
    program: list[str]
    section_set: str = "full"
    status: str = "planned"
    seconds: float | None = None
    note: str = ""

    def argv(self) -> list[str]:
        """The program, its paths from the repo root made absolute (ncu runs it from wherever this runs)."""
        return [str(REPO / a) if a.startswith(("build/", "fixtures/")) else a for a in self.program]

    @property
    def source(self) -> Path | None:
        """The .cu file a build/fixtures/NAME program is built from (None for a Python program)."""
        exe = self.program[0]
        return KERNELS / f"{Path(exe).name}.cu" if exe.startswith("build/fixtures/") else None


def read_table(path: Path = TABLE, only: list[str] | None = None) -> list[Recording]:
    """The table's lines (name, expected id, kernel regex, launches to skip, program...), `only` those named."""
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 5 or not parts[3].isdigit():
            raise ValueError(f"{path}:{n}: want NAME EXPECTED REGEX SKIP PROGRAM..., got: {line.strip()}")
        rec = Recording(parts[0], parts[1], parts[2], int(parts[3]), parts[4:])
        src = rec.source
        if src is not None and src.is_file():
            marked = [ln.split(":", 1)[1].strip() for ln in src.read_text().splitlines() if ln.startswith("// ncu-set:")]
            rec.section_set = marked[0] if marked else "full"
        rows.append(rec)
    names = {r.name for r in rows}
    unknown = sorted(set(only or []) - names - {SNAPSHOT})
    if unknown:
        raise ValueError(f"not in {path.name}: {', '.join(unknown)} (lines: {', '.join(sorted(names))}, {SNAPSHOT})")
    return [r for r in rows if not only or r.name in only]


def build_commands(recordings: list[Recording]) -> list[list[str]]:
    """nvcc for every .cu the recordings run (each once)."""
    out, seen = [], set()
    for r in recordings:
        src = r.source
        if src is None or src in seen:
            continue
        seen.add(src)
        flags = [ln.split(":", 1)[1].split() for ln in src.read_text().splitlines() if ln.startswith("// nvcc-flags:")]
        out.append(["nvcc", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-lineinfo", *(flags[0] if flags else []),
                    "-o", f"build/fixtures/{src.stem}", str(src.relative_to(REPO))])
    return out


def check_out(out: Path, names: list[str], force: bool) -> None:
    """OUT is a folder; the files this run writes replace earlier ones only with --force (perflab.outputs)."""
    from perflab.errors import PerflabError
    from perflab.outputs import check_folder

    holds = [f"{n}.ncu-rep*" for n in names] + [f"{n}.csv" for n in names] + ["gains.manifest.json"]
    try:
        check_folder(out, force=force, holds=holds)
    except PerflabError as exc:
        raise ValueError(str(exc)) from None


def _run(cmd: list[str], timeout: float = TIMEOUT_S) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        return p.returncode, (p.stdout + p.stderr).strip()
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return 127, str(exc)


def _last(text: str) -> str:
    return text.strip().splitlines()[-1][:300] if text.strip() else ""


def record_kernel(r: Recording, out: Path) -> None:
    from perflab.errors import PerflabError
    from perflab.toolkit.ncu_runner import profile

    t0 = time.monotonic()
    try:
        run = profile(r.argv(), out_dir=out, name=r.name, kernel=r.kernel, launch_count=1, launch_skip=r.skip,
                      section_set=r.section_set, extra_metrics=r.section_set == "full", force=True)
        with open(run.report, "rb") as src, gzip.open(f"{run.report}.gz", "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        run.report.unlink()
        r.status, r.note = "recorded", " ".join(shlex.quote(c) for c in run.command)
    except PerflabError as exc:
        r.status, r.note = "failed", str(exc)
    r.seconds = round(time.monotonic() - t0, 1)


def record_snapshot(out: Path) -> dict:
    """The offload loop's snapshot, memory held short first; --empty-cache where that churned too little."""
    from perflab.analysis.gpu_memory.segment_churn import segment_churn
    from perflab.trace.snapshot import convert, load

    pickle_path = out / f"{SNAPSHOT}.pickle"
    t0 = time.monotonic()
    entry: dict = {"name": SNAPSHOT, "program": str(SNAPSHOT_PROGRAM.relative_to(REPO))}
    for mode in ([], ["--empty-cache"]):
        code, text = _run([sys.executable, str(SNAPSHOT_PROGRAM), str(pickle_path), *mode])
        entry.update(mode=" ".join(mode) or "memory held short", exit=code, last_line=_last(text))
        if code != 0 or not pickle_path.is_file():
            continue
        churn = segment_churn(load(pickle_path)) or {}
        entry["cycled_segments"] = churn.get("cycled_segments", 0)
        if entry["cycled_segments"] >= MIN_CYCLES:
            convert(pickle_path, out / f"{SNAPSHOT}.memory.json.gz", force=True)
            entry.update(status="recorded", seconds=round(time.monotonic() - t0, 1))
            return entry
    entry.update(status="failed", seconds=round(time.monotonic() - t0, 1))
    return entry


def manifest(recordings: list[Recording], snapshot: dict | None, argv: list[str]) -> dict:
    def out(cmd):
        code, text = _run(cmd, timeout=60)
        return text if code == 0 else None

    smi = out(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,clocks.sm,clocks.max.sm,clocks.mem",
               "--format=csv,noheader"]) or ""
    fields = [f.strip() for f in smi.splitlines()[0].split(",")] if smi else []
    versions = {}
    for mod in ("torch", "triton"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = None
    try:
        from perflab.toolkit.ncu_runner import find_ncu
        ncu = _last(out([find_ncu(), "--version"]) or "")
    except Exception as exc:  # noqa: BLE001  (a manifest says what it could not find)
        ncu = f"not found: {exc}"
    return {
        "gpu": fields[0] if fields else None, "driver": fields[1] if len(fields) > 1 else None,
        "cc": fields[2] if len(fields) > 2 else None,
        "clocks_at_record": {"sm": fields[3], "sm_max": fields[4], "mem": fields[5]} if len(fields) > 5 else None,
        "ncu": ncu, "nvcc": _last(out(["nvcc", "--version"]) or ""), **versions,
        "cuda": getattr(getattr(sys.modules.get("torch"), "version", None), "cuda", None),
        "python": sys.version.split()[0], "host": socket.gethostname(), "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python3 scripts/record.py gain-fixtures " + " ".join(shlex.quote(a) for a in argv),
        "ncu_options": "--set full (or the file's // ncu-set) + extra metrics, 1 launch after the table's skip, "
                       "--clock-control none",
        "recordings": [asdict(r) for r in recordings], "snapshot": snapshot,
    }


def main(argv: list[str] | None = None, prog: str = "record.py gain-fixtures") -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the folder to write the recordings into")
    ap.add_argument("--only", nargs="+", metavar="NAME", help=f"only these lines of GAINS (or {SNAPSHOT})")
    ap.add_argument("--force", action="store_true", help="replace recordings OUT already holds")
    ap.add_argument("--dry-run", action="store_true", help="print what would run; build and record nothing")
    args = ap.parse_args(argv)
    args.out = args.out.resolve()
    try:
        recordings = read_table(TABLE, args.only)
        if not args.dry_run:
            check_out(args.out, [r.name for r in recordings], args.force)
    except ValueError as exc:
        print(f"record.py gain-fixtures: error: {exc}", file=sys.stderr)
        return 2
    snap = not args.only or SNAPSHOT in args.only
    builds = build_commands(recordings)
    if args.dry_run:
        for cmd in builds:
            print("build: " + " ".join(shlex.quote(c) for c in cmd))
        for r in recordings:
            print(f"ncu {r.name}: --set {r.section_set} -k regex:{r.kernel} -s {r.skip} -c 1 -- {' '.join(r.program)}"
                  f" -> {args.out / (r.name + '.ncu-rep.gz')}, {args.out / (r.name + '.csv')}")
        if snap:
            print(f"snapshot: {sys.executable} {SNAPSHOT_PROGRAM.relative_to(REPO)} {args.out / (SNAPSHOT + '.pickle')}"
                  f" -> {args.out / (SNAPSHOT + '.memory.json.gz')}")
        print(f"manifest: {args.out / 'gains.manifest.json'}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (REPO / "build" / "fixtures").mkdir(parents=True, exist_ok=True)   # nvcc runs from the repo root (_run)
    failed = False
    for cmd in builds:
        code, text = _run(cmd, timeout=300)
        print(f"{'built' if code == 0 else 'BUILD FAILED'}: {' '.join(cmd)}" + ("" if code == 0 else f"\n{text}"))
        failed |= code != 0
    for r in recordings:
        record_kernel(r, args.out)
        print(f"{r.name}: {r.status} ({r.seconds} s){'' if r.status == 'recorded' else ': ' + r.note}")
        failed |= r.status != "recorded"
    snapshot = record_snapshot(args.out) if snap else None
    if snapshot is not None:
        print(f"{SNAPSHOT}: {snapshot['status']} ({snapshot['seconds']} s, {snapshot.get('mode')}, "
              f"{snapshot.get('cycled_segments', 0)} segments cycled)")
        failed |= snapshot["status"] != "recorded"
    text = json.dumps(manifest(recordings, snapshot, argv), indent=2)
    (args.out / "gains.manifest.json").write_text(text + "\n")
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
