#!/usr/bin/env python3
"""Summarize the fix checks recorded with every puzzle (scripts/record_artifacts.py runs them on the GPU
machine: the solution must pass, the unchanged starter must fail) as one Markdown table.

    python3 scripts/catalog_summary.py        # exit 1 when a recorded check is wrong or a puzzle is unrecorded
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from perflab.puzzles import catalog  # noqa: E402


def row(p) -> tuple[str, bool]:
    art = p.folder / "artifacts"
    if not (art / "measurements.json").exists():
        return f"| {p.id} | — | not recorded | | | | |", False
    m = json.loads((art / "measurements.json").read_text())
    gpu = json.loads((art / "manifest.json").read_text()).get("gpu") or "?"
    sp, check = m.get("speedup") or {}, m.get("check") or {}
    sol, st = check.get("solution") or {}, check.get("starter") or {}
    ok = bool(sol.get("passed")) and st.get("passed") is False
    ratio = f"{sp['point']:.2f}x ({sp['ci_low']:.2f})" if sp.get("point") and sp.get("ci_low") else "?"
    return (f"| {p.id} | {gpu} | {sp.get('statistic', '?')} | {ratio} | {sp.get('bar')} | "
            f"{'passes' if sol.get('passed') else 'FAILS: ' + str(sol.get('why'))} | "
            f"{'fails' if st.get('passed') is False else 'PASSES'} |"), ok


def main() -> int:
    print("| puzzle | recorded on | statistic | slow/fixed (95 % CI low) | bar | solution | starter |")
    print("|---|---|---|---|---|---|---|")
    rows = [row(p) for p in catalog.load_catalog([catalog.BUILTIN])]
    for text, _ in rows:
        print(text)
    good = sum(ok for _, ok in rows)
    print(f"\n{good} of {len(rows)} puzzles: recorded, solution passes, starter fails")
    return 0 if good == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
