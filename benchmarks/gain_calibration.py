"""Gain calibration on the recorded catalog: the doctor's predicted speed-up for each puzzle's planted finding
against the speed-up its fix measured on the GPU. Prints the table (markdown, worst first) and the summary
line; `--json` prints one object instead; `--write FILE` writes the calibration page (docs/calibration): how the
rows were predicted and measured, the table with each row's method, the summary. CPU only: reads the recorded
artifacts.

    PYTHONPATH=src python3 benchmarks/gain_calibration.py [--json] [--puzzle ID ...] [--write FILE [--force]]
                                                          [--title TEXT] [--note TEXT]
"""
from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
from pathlib import Path

METHOD = """\
Each row is one catalog puzzle whose fix was measured on the GPU (its recorded `artifacts/measurements.json`,
`speedup.point`). **Measured**: the recording's statistic, slow over fix: the median step time of interleaved
repetitions of the slow and the fixed program (the fix check's runs), or the ratio of peak reserved memory
(memory puzzles), or of the ITL p99 (serving), on the GPU and date the row names. **Predicted**: the doctor's
reading of the slow program's recorded evidence, at the level the puzzle plants its finding: the finding's point
estimate of the step's speed-up where it states one (`speedup_est`; a kernel finding's `kernel_speedup_est`
through the kernel's share of the slow trace's step, Amdahl's law), else 1 / (1 - gain). **Stated range**: the
finding's floor and ceiling (`speedup_at_least` / `_at_most`, a kernel finding's `kernel_speedup_at_least` /
`_at_most` through its share); **in range** says whether the measurement lies inside it. Ratio = predicted /
measured; rows are ordered from the farthest miss down. Nothing here is fitted to a puzzle: the predictions come
from the doctor's model of the work against the GPU's ceilings, the measurements from the recordings.
"""


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=30,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except OSError:
        return ""


def page(summary, title: str, argv: list[str], note: str = "") -> str:
    from perflab.puzzles.calibration import table_with_method

    commit = _git("rev-parse", "--short", "HEAD") or "?"
    dirty = " plus uncommitted changes" if _git("status", "--porcelain", "--untracked-files=no") else ""
    skipped = [r for r in summary.rows if r.skipped]
    notes = [r for r in summary.judged if r.note]
    parts = [f"# {title}", "",
             f"Generated {datetime.date.today().isoformat()} at commit {commit}{dirty} by "
             f"`PYTHONPATH=src python3 benchmarks/gain_calibration.py {' '.join(shlex.quote(a) for a in argv)}`."
             + (f" {note}" if note else ""), "", METHOD,
             f"**Summary.** {summary.line()}", "", table_with_method(summary), ""]
    if skipped:
        parts += ["Not calibrated: " + "; ".join(f"{r.puzzle} ({r.skipped})" for r in skipped) + ".", ""]
    parts += [f"Note: {r.puzzle}: {r.note}." for r in notes]
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    from perflab.errors import PerflabError
    from perflab.outputs import write_output
    from perflab.puzzles.calibration import calibrate_catalog, table
    from perflab.puzzles.engine.catalog import load_catalog

    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object (schema perflab.gain-calibration/1)")
    ap.add_argument("--puzzle", action="append", default=[], help="only these puzzle ids")
    ap.add_argument("--write", type=Path, help="write the calibration page (markdown) to FILE")
    ap.add_argument("--force", action="store_true", help="with --write: replace an existing FILE")
    ap.add_argument("--title", default="Gain calibration", help="with --write: the page's title")
    ap.add_argument("--note", default="", help="with --write: a sentence under the title (what tree was read)")
    args = ap.parse_args(argv)
    puzzles = [p for p in load_catalog() if not args.puzzle or p.id in args.puzzle]
    summary = calibrate_catalog(puzzles)
    if args.write:
        try:
            write_output(args.write, page(summary, args.title, argv, args.note), force=args.force)
        except PerflabError as exc:
            print(f"gain_calibration: error: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {args.write}: {summary.line()}")
        return 0
    if args.json:
        print(json.dumps(summary.to_dict(), indent=1))
        return 0
    print(table(summary))
    skipped = [r for r in summary.rows if r.skipped]
    if skipped:
        print("\nnot calibrated: " + "; ".join(f"{r.puzzle} ({r.skipped})" for r in skipped))
    notes = [r for r in summary.judged if r.note]
    for r in notes:
        print(f"note: {r.puzzle}: {r.note}")
    print("\n" + summary.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
