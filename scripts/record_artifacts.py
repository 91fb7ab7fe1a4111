#!/usr/bin/env python3
"""Record puzzle artifacts on the GPU machine (profiles, timings, checks) for replay without a GPU.

    python3 scripts/record_artifacts.py [IDS...] [--out DIR] [--force] [--seed N] [--check-only]
                                        [--jsonl FILE [--resume]] [--budget-s S] [--keep-failed DIR]

For each puzzle (all when no id is given): profile slow and solution under torch.profiler, check the
solution (must pass) and the starter (must fail) with the fix checker (its interleaved timings become
measurements.json), and write manifest.json, slow/solution.trace.json.gz and measurements.json into
the puzzle's catalog folder (kernel puzzles, tools = ["ncu"]: also <variant>.ncu-rep.gz and its raw
page <variant>.csv.gz; tools = ["autotune"]: <variant>.autotune.json), or into
DIR/<NN-slug>/artifacts/ with --out (copy those back with
`cp -r DIR/* src/perflab/catalog/`). A puzzle whose checks do not come out right is not written
unless --force. --check-only runs the two checks and writes nothing (scripts/check_catalog_gpu.py).
With no ids, puzzles this machine cannot run (more GPUs than it has, a missing package) are listed as
"not run here" instead of refusing the whole run. --jsonl appends one JSON object per puzzle as soon as
it is done (a run cut short keeps what it finished; scripts/catalog_summary.py --checks reads it);
--resume skips the puzzles FILE already has a check for; --budget-s starts no new puzzle once that many
seconds have passed. Together they spread a whole-catalog check over several calls of limited length.
--keep-failed copies the check folders (traces, check.json) of a puzzle that does not behave to DIR/<id>/,
so a failure on a remote machine can be read afterwards.
Exit 0 when every puzzle came out right, 1 otherwise, 2 on bad input.
"""
from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))  # this tree's code and catalog, ahead of any installed wheel

from perflab.errors import PerflabError  # noqa: E402
from perflab.puzzles.engine import catalog, recording, runner  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ids", nargs="*", help="puzzle ids (default: the whole catalog)")
    ap.add_argument("--out", type=Path, help="write DIR/<NN-slug>/artifacts/ instead of the catalog folders")
    ap.add_argument("--force", action="store_true", help="write even when the checks do not come out right")
    ap.add_argument("--seed", type=int, help="input seed for the checks (default: fresh random)")
    ap.add_argument("--check-only", action="store_true", help="check solution and starter; write nothing")
    ap.add_argument("--jsonl", type=Path, help="append one JSON line per puzzle to FILE as each one finishes")
    ap.add_argument("--resume", action="store_true", help="skip puzzles that --jsonl FILE already has a check for")
    ap.add_argument("--budget-s", type=float, help="start no new puzzle after this many seconds")
    ap.add_argument("--keep-failed", type=Path, metavar="DIR",
                    help="copy the check folders of a puzzle that does not behave to DIR/<id>/")
    args = ap.parse_args(argv)
    if args.resume and not args.jsonl:
        ap.error("--resume needs --jsonl FILE")
    t0 = time.monotonic()
    command = "python3 scripts/record_artifacts.py " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        puzzles = catalog.load_catalog()
        chosen = [catalog.find(puzzles, i) for i in args.ids] if args.ids else puzzles
        if args.resume:
            done = _checked(args.jsonl)
            chosen = [p for p in chosen if p.id not in done]
        if args.ids:
            devices = [runner.require_device(p, "recording") for p in chosen]  # refuse before any long work
        else:
            devices = [_device_or_reason(p) for p in chosen]
        rows, skipped, crashed = [], [], 0
        for p, device in zip(chosen, devices):
            if isinstance(device, Exception):
                skipped.append((p, f"not run here: {device}"))
                _log(args.jsonl, p, None, f"not run here: {device}", time.monotonic() - t0)
                continue
            if args.budget_s is not None and time.monotonic() - t0 > args.budget_s:
                skipped.append((p, f"not run: the {args.budget_s:.0f} s budget was spent"))
                continue
            started = time.monotonic()
            dest = (args.out / p.folder.name / "artifacts") if args.out else p.artifacts
            print(f"{'checking' if args.check_only else 'recording'} {p.id} on {device} ...", flush=True)
            try:
                with tempfile.TemporaryDirectory(prefix=f"perflab-rec-{p.id}-") as tmp:
                    if args.check_only:
                        v, written = recording.verify(p, device, Path(tmp), args.seed), False
                    else:
                        v, written = recording.record(p, dest, device, Path(tmp), command.strip(),
                                                      force=args.force, seed=args.seed)
                    if args.keep_failed and not v.ok:
                        shutil.copytree(tmp, args.keep_failed / p.id, dirs_exist_ok=True)
            except Exception as exc:  # one puzzle's crash (its kernel, ncu, torchrun) must not lose the others
                traceback.print_exc()
                why = f"crashed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                skipped.append((p, why))
                crashed += 1
                _log(args.jsonl, p, None, why, time.monotonic() - started)
                continue
            rows.append((p, v, dest if written else None))
            _log(args.jsonl, p, v, "ok" if v.ok else "; ".join(v.problems()), time.monotonic() - started)
    except PerflabError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        return 2
    print_table(rows, args.check_only)
    for p, why in skipped:
        print(f"{p.id}: {why}")
    good = sum(v.ok for _, v, _ in rows)
    print(f"{good} of {len(rows)} checked puzzles behave (solution passes, starter fails); "
          f"{len(skipped)} not checked (listed above)")
    return 0 if not crashed and all(v.ok and (dest or args.check_only) for _, v, dest in rows) else 1


def _checked(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["puzzle"] for r in rows if "ok" in r}


def _device_or_reason(p) -> str | Exception:
    try:
        return runner.require_device(p, "checking")
    except PerflabError as exc:
        return exc


def _log(path: Path | None, p, v, verdict: str, seconds: float) -> None:
    """One JSON line per puzzle: what scripts/catalog_summary.py --checks reads."""
    if path is None:
        return
    row = {"puzzle": p.id, "verdict": verdict, "seconds": round(seconds, 1),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if v is not None:
        sp = v.solution.speed
        row.update(ok=v.ok, solution_passed=v.solution.passed, starter_passed=v.starter.passed,
                   solution_why=recording.why_failed(v.solution), starter_why=recording.why_failed(v.starter),
                   statistic=sp.statistic if sp else None, point=sp.point if sp else None,
                   ci_low=sp.ci_low if sp else None, ci_high=sp.ci_high if sp else None, bar=sp.bar if sp else None,
                   starter_ci_low=v.starter.speed.ci_low if v.starter.speed else None,
                   solution_found=v.solution.evidence.found if v.solution.evidence else None)
        try:
            import torch
            row.update(gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                       torch=torch.__version__)
        except ImportError:
            row.update(gpu="cpu")
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def print_table(rows: list, check_only: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="fix checks" if check_only else "recorded artifacts")
    cols = ["puzzle", "slow ms", "solution ms", "speed-up (95 % CI)", "bar", "solution (must pass)",
            "starter (must fail)", "verdict" if check_only else "written"]
    for col in cols:
        t.add_column(col)
    for p, v, dest in rows:
        s, sp = v.solution, v.solution.speed
        verdict = "ok" if v.ok else "WRONG: " + "; ".join(v.problems())
        t.add_row(p.id, f"{s.slow.get('median_ms', float('nan')):.3f}", f"{s.fixed.get('median_ms', float('nan')):.3f}",
                  f"{sp.point:.2f} ({sp.ci_low:.2f}–{sp.ci_high:.2f})" if sp else "-", f"{p.check.speedup:.2f}",
                  recording.why_failed(s), recording.why_failed(v.starter),
                  verdict if check_only or not dest else str(dest))
    Console(width=200).print(t)


if __name__ == "__main__":
    sys.exit(main())
