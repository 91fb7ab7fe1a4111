"""Gain calibration on the recorded catalog: the doctor's predicted speed-up for each puzzle's planted finding
against the speed-up its fix measured on the GPU. Prints the table (markdown, worst first) and the summary
line; `--json` prints one object instead. CPU only: reads the recorded artifacts.

    PYTHONPATH=src python3 benchmarks/gain_calibration.py [--json] [--puzzle ID ...]
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    from perflab.puzzles.calibration import calibrate_catalog, table
    from perflab.puzzles.engine.catalog import load_catalog

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object (schema perflab.gain-calibration/1)")
    ap.add_argument("--puzzle", action="append", default=[], help="only these puzzle ids")
    args = ap.parse_args(argv)
    puzzles = [p for p in load_catalog() if not args.puzzle or p.id in args.puzzle]
    summary = calibrate_catalog(puzzles)
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
