"""Summarize the fix checks recorded with every puzzle (`record.py puzzle` runs them on the GPU machine: the
solution must pass, the unchanged starter must fail) as one Markdown table. No GPU needed.

    record.py catalog-summary        # exit 1 when a recorded check is wrong or a puzzle is unrecorded
    record.py catalog-summary --checks A.jsonl [B.jsonl ...]

--checks summarizes live re-checks instead (the JSON lines of `record.py catalog-check --jsonl`, one file per
machine or call; a later line for a puzzle replaces an earlier one).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import recorders.common  # noqa: F401  (this tree's src first)
from perflab.puzzles.engine import catalog, replay  # noqa: E402


def row(p) -> tuple[str, bool]:
    if not replay.is_recorded(p):
        return f"| {p.id} | — | not recorded | | | | |", False
    m = replay.read_json(p.artifacts / "measurements.json")
    gpu = replay.read_json(p.artifacts / "manifest.json").get("gpu") or "?"
    sp, check = m.get("speedup") or {}, m.get("check") or {}
    sol, st = check.get("solution") or {}, check.get("starter") or {}
    ok = bool(sol.get("passed")) and st.get("passed") is False
    ratio = f"{sp['point']:.2f}x ({sp['ci_low']:.2f})" if sp.get("point") and sp.get("ci_low") else "?"
    return (f"| {p.id} | {gpu} | {sp.get('statistic', '?')} | {ratio} | {sp.get('bar')} | "
            f"{'passes' if sol.get('passed') else 'FAILS: ' + str(sol.get('why'))} | "
            f"{'fails' if st.get('passed') is False else 'PASSES'} |"), ok


def live_rows(files: list[Path]) -> int:
    latest: dict[str, dict] = {}
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                if r["puzzle"] not in latest or "ok" in r or "ok" not in latest[r["puzzle"]]:
                    latest[r["puzzle"]] = r
    print("| puzzle | checked on | date | slow/fixed (95 % CI) | bar | solution | starter | s |")
    print("|---|---|---|---|---|---|---|---|")
    good = checked = 0
    for p in catalog.load_catalog([catalog.BUILTIN]):
        r = latest.get(p.id)
        if r is None or "ok" not in r:
            print(f"| {p.id} | — | | {(r or {}).get('verdict', 'not checked').split(' (')[0].split(';')[0]} | | | | |")
            continue
        checked += 1
        good += bool(r["ok"])
        ratio = f"{r['point']:.2f}x ({r['ci_low']:.2f}–{r['ci_high']:.2f})" if r.get("ci_low") is not None else "?"
        print(f"| {p.id} | {r.get('gpu', '?')} | {r['date'][:16]} | {ratio} | {r['bar']:.2f} | "
              f"{'passes' if r['solution_passed'] else 'FAILS: ' + r['solution_why']} | "
              f"{'fails' if not r['starter_passed'] else 'PASSES'} ({r['starter_why']}) | {r['seconds']:.0f} |")
    total = len(catalog.load_catalog([catalog.BUILTIN]))
    print(f"\n{good} of {checked} checked puzzles behave (solution passes, starter fails); "
          f"{total - checked} of {total} not checked live")
    return 0 if good == checked == total else 1


def main(argv: list[str], prog: str = "record.py catalog-summary") -> int:
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if argv[:1] == ["--checks"]:
        files = [Path(a) for a in argv[1:]]
        missing = [str(f) for f in files if not f.is_file()]
        if not files or missing:
            print(f"{prog}: error: --checks needs JSON-lines files ({', '.join(missing) or 'none given'})",
                  file=sys.stderr)
            return 2
        return live_rows(files)
    if argv:
        print(f"{prog}: error: unknown arguments {' '.join(argv)} (--checks FILE ... or none)", file=sys.stderr)
        return 2
    print("| puzzle | recorded on | statistic | slow/fixed (95 % CI low) | bar | solution | starter |")
    print("|---|---|---|---|---|---|---|")
    rows = [row(p) for p in catalog.load_catalog([catalog.BUILTIN])]
    for text, _ in rows:
        print(text)
    good = sum(ok for _, ok in rows)
    print(f"\n{good} of {len(rows)} puzzles: recorded, solution passes, starter fails")
    return 0 if good == len(rows) else 1
