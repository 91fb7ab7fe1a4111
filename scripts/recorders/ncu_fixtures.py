"""Nsight Compute reports of the kernel fixtures (fixtures/kernels), on the GPU machine.

    record.py ncu-fixtures [NAME ...] [--table fixtures/kernels/FIXTURES] [--out tests/data/ncu] [--return-to DIR]

Builds fixtures/kernels/*.cu for sm_90a (nvcc, 8 at a time), profiles each fixture of the table (every one, or the
NAMEs) with Nsight Compute: --set full plus the doctor's extra metrics, or the set a `// ncu-set: SET` line of
NAME.cu names, alone; one launch after the table's skip; --clock-control none: clocks are never touched. Writes
NAME.ncu-rep.gz, NAME.csv (the raw page, `ncu --import NAME.ncu-rep --page raw --csv`) and manifest.json into
--out; with --return-to, into a folder of its own packed there as ncu_fixtures.tgz.
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from recorders.common import REPO, child_env, run_logged, work_folder

KERNELS = REPO / "fixtures" / "kernels"
BUILD = REPO / "build" / "fixtures"
PROFILE_ONE = """
import sys
from pathlib import Path
from perflab.toolkit.ncu_runner import profile
out, name, regex, skip, section_set, *prog = sys.argv[1:]
run = profile(prog, out_dir=Path(out), name=name, kernel=regex, launch_count=1, launch_skip=int(skip),
              section_set=section_set, extra_metrics=section_set == "full")
print(f"recorded {name} ({section_set}): {run.report.stat().st_size >> 10} KiB report, {run.csv.stat().st_size >> 10} KiB csv")
"""


def main(argv: list[str], prog: str = "record.py ncu-fixtures") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="only these fixtures (default: every line of the table)")
    ap.add_argument("--table", type=Path, default=KERNELS / "FIXTURES", help="FIXTURES or VALIDATION")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "ncu")
    ap.add_argument("--return-to", type=Path, metavar="DIR", help="record into a folder of its own, packed into DIR")
    args = ap.parse_args(argv)
    rows = [line.split(maxsplit=4) for line in args.table.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
    if unknown := sorted(set(args.names) - {r[0] for r in rows}):
        ap.error(f"not in {args.table.name}: {', '.join(unknown)}")
    out = work_folder("ncu_fixtures") if args.return_to else args.out
    out.mkdir(parents=True, exist_ok=True)
    from perflab.toolkit.ncu_runner import find_ncu

    ncu = str(find_ncu())
    print(f"ncu: {ncu} ({_last_line([ncu, '--version'])})", flush=True)
    build_all()
    for name, _planted, regex, skip, program in rows:
        if args.names and name not in args.names:
            continue
        t0 = time.monotonic()
        source = KERNELS / f"{name}.cu"
        section = next((ln.split(":", 1)[1].strip() for ln in source.read_text().splitlines()
                        if ln.startswith("// ncu-set:")), "full") if source.is_file() else "full"
        rc = run_logged([sys.executable, "-c", PROFILE_ONE, out, name, regex, skip, section, *program.split()],
                        out / f"{name}.record.log", 150, tail=2, env=child_env())
        if rc != 0:
            print(f"RECORD FAILED: {name} (exit {rc})", flush=True)
        report = out / f"{name}.ncu-rep"
        if report.is_file():
            with report.open("rb") as src, gzip.open(f"{report}.gz", "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
            report.unlink()
        print(f"  ({name}: {time.monotonic() - t0:.0f} s)", flush=True)
    manifest = subprocess.run([sys.executable, KERNELS / "manifest.py", ncu], capture_output=True, text=True)
    (out / "manifest.json").write_text(manifest.stdout, encoding="utf-8")
    print(manifest.stdout)
    if args.return_to:
        from recorders.common import pack

        pack(out, args.return_to)
    return 0


def build_all() -> None:
    """Every fixtures/kernels/*.cu built for sm_90a with its `// nvcc-flags:` line; a failure is printed."""
    BUILD.mkdir(parents=True, exist_ok=True)

    def build(source: Path) -> None:
        flags = next((ln.split(":", 1)[1].split() for ln in source.read_text().splitlines()
                      if ln.startswith("// nvcc-flags:")), [])
        cmd = ["nvcc", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-lineinfo", *flags, "-o",
               str(BUILD / source.stem), str(source)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        print(" ".join(cmd) if p.returncode == 0 else f"BUILD FAILED: {' '.join(cmd)}\n{p.stderr[-2000:]}", flush=True)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(build, sorted(KERNELS.glob("*.cu"))))


def _last_line(cmd: list[str]) -> str:
    try:
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return text.splitlines()[-1] if text else ""
