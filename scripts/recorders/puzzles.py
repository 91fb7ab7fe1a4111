"""Record puzzles end to end on the GPU machine, or check the catalog's fix checkers there.

    record.py puzzle ID [ID...] [--out DIR | --return-to DIR] [--force] [--seed N] [--jsonl FILE]
                                [--budget-s S] [--keep-failed DIR] [--trim-traces MS] [--time-limit S]
    record.py catalog-check [ID...] [--jsonl FILE [--resume]] [--budget-s S] [--keep-failed DIR]
                                [--seed N] [--return-to DIR] [--time-limit S]

`puzzle`: for each puzzle, profile slow and solution under torch.profiler, check the solution (must pass) and
the starter (must fail) with the fix checker (its interleaved timings become measurements.json), and write
manifest.json, slow/solution.trace.json.gz and measurements.json into the puzzle's catalog folder (kernel
puzzles, tools = ["ncu"]: also <variant>.ncu-rep.gz and its raw page <variant>.csv.gz; tools = ["autotune"]:
<variant>.autotune.json), or into DIR/<NN-slug>/artifacts/ with --out. A puzzle whose checks do not come out
right is not written unless --force. --trim-traces MS cuts each written trace over 1 MB to its first MS ms of
host time (scripts/trim_trace.py) and says so in manifest.json.

`catalog-check`: the two checks alone, nothing written; with no ids, the whole catalog, where puzzles this
machine cannot run (more GPUs than it has, a missing package) are listed as "not run here".

Both: --jsonl appends one JSON object per puzzle as soon as it is done (a run cut short keeps what it
finished; `record.py catalog-summary --checks` reads it); --resume skips the puzzles FILE already has a
check for; --budget-s starts no new puzzle once that many seconds have passed: together they spread a
whole-catalog check over several calls of limited length. --keep-failed copies the check folders (traces,
check.json) of a puzzle that does not behave to DIR/<id>/. --return-to DIR runs the whole thing in a child
process (ended at --time-limit seconds, if given) and packs what it wrote (the artifacts, the JSON lines, the
log, failed/, the machine's description) as DIR/rec.tgz (`puzzle`) or DIR/check.tgz (`catalog-check`).
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

from recorders.common import describe_machine, record_py, run_logged, work_folder

from perflab.errors import PerflabError  # noqa: E402  (common put this tree's src first)
from perflab.puzzles.engine import catalog, recording, runner  # noqa: E402

BIG_TRACE = 1 << 20


def record(argv: list[str], prog: str = "record.py puzzle") -> int:
    return _main("puzzle", argv, prog)


def check(argv: list[str], prog: str = "record.py catalog-check") -> int:
    return _main("catalog-check", argv, prog)


def _parser(sub: str, prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("ids", nargs="*" if sub == "catalog-check" else "+",
                    help="puzzle ids" + (" (default: the whole catalog)" if sub == "catalog-check" else ""))
    if sub == "puzzle":
        ap.add_argument("--out", type=Path, help="write DIR/<NN-slug>/artifacts/ instead of the catalog folders")
        ap.add_argument("--force", action="store_true", help="write even when the checks do not come out right")
        ap.add_argument("--trim-traces", type=float, metavar="MS",
                        help="cut each written trace over 1 MB to its first MS ms of host time")
    ap.add_argument("--seed", type=int, help="input seed for the checks (default: fresh random)")
    ap.add_argument("--jsonl", type=Path, help="append one JSON line per puzzle to FILE as each one finishes")
    if sub == "catalog-check":
        ap.add_argument("--resume", action="store_true", help="skip puzzles that --jsonl FILE already has a check for")
    ap.add_argument("--budget-s", type=float, help="start no new puzzle after this many seconds")
    ap.add_argument("--keep-failed", type=Path, metavar="DIR",
                    help="copy the check folders of a puzzle that does not behave to DIR/<id>/")
    ap.add_argument("--return-to", type=Path, metavar="DIR", help="pack everything written as one .tgz into DIR")
    ap.add_argument("--time-limit", type=float, metavar="S", help="end the run after S seconds (then pack)")
    return ap


def _main(sub: str, argv: list[str], prog: str) -> int:
    ap = _parser(sub, prog)
    args = ap.parse_args(argv)
    if getattr(args, "resume", False) and not args.jsonl:
        ap.error("--resume needs --jsonl FILE")
    if args.return_to and getattr(args, "out", None):
        ap.error("--return-to records into a folder of its own: give --out or --return-to, not both")
    if args.return_to or args.time_limit:
        return _in_child(sub, args, argv)
    return run(args, sub == "catalog-check", "python3 scripts/record.py " + " ".join([sub, *argv]))


def _in_child(sub: str, args: argparse.Namespace, argv: list[str]) -> int:
    """The same run in a child process under the time limit; with --return-to, into a folder of its own (the
    catalog untouched), packed there at the end, whatever the limit left."""
    folder = work_folder("rec" if sub == "puzzle" else "check")
    describe_machine(folder / "gpu.txt")
    child = [*record_py(sub), *_without(argv, "--return-to", "--time-limit")]
    if args.return_to:   # what comes back: the artifacts, the JSON lines and the failed checks, in the folder
        child += ["--out", str(folder)] if sub == "puzzle" else []
        child += [] if args.jsonl else ["--jsonl", str(folder / "checks.jsonl")]
        child += [] if args.keep_failed else ["--keep-failed", str(folder / "failed")]
    rc = run_logged(child, folder / f"{folder.name}.log", args.time_limit or 10.0 ** 7, tail=40, cwd=Path.cwd())
    if args.jsonl and args.jsonl.is_file():
        shutil.copy(args.jsonl, folder / args.jsonl.name)
    if args.return_to:
        from recorders.common import pack

        pack(folder, args.return_to)
    return rc


def _without(argv: list[str], *options: str) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in options:
            skip = True
        elif not a.startswith(tuple(f"{o}=" for o in options)):
            out.append(a)
    return out


def run(args: argparse.Namespace, check_only: bool, command: str) -> int:
    t0 = time.monotonic()
    try:
        puzzles = catalog.load_catalog()
        chosen = [catalog.find(puzzles, i) for i in args.ids] if args.ids else puzzles
        if getattr(args, "resume", False):
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
            out = getattr(args, "out", None)
            dest = (out / p.folder.name / "artifacts") if out else p.artifacts
            print(f"{'checking' if check_only else 'recording'} {p.id} on {device} ...", flush=True)
            try:
                with tempfile.TemporaryDirectory(prefix=f"perflab-rec-{p.id}-") as tmp:
                    if check_only:
                        v, written = recording.verify(p, device, Path(tmp), args.seed), False
                    else:
                        v, written = recording.record(p, dest, device, Path(tmp), command.strip(),
                                                      force=args.force, seed=args.seed)
                    if args.keep_failed and not v.ok:
                        shutil.copytree(tmp, args.keep_failed / p.id, dirs_exist_ok=True)
                if written and getattr(args, "trim_traces", None):
                    trim_traces(dest, args.trim_traces)
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
        print(f"record.py: error: {exc}", file=sys.stderr)
        return 2
    print_table(rows, check_only)
    for p, why in skipped:
        print(f"{p.id}: {why}")
    good = sum(v.ok for _, v, _ in rows)
    print(f"{good} of {len(rows)} checked puzzles behave (solution passes, starter fails); "
          f"{len(skipped)} not checked (listed above)")
    return 0 if not crashed and all(v.ok and (dest or check_only) for _, v, dest in rows) else 1


def trim_traces(artifacts: Path, ms: float) -> None:
    """Each trace over 1 MB cut to its first `ms` of host time; manifest.json says so."""
    from trim_trace import read_trace, trim, write_trace

    cut = []
    for path in sorted(artifacts.rglob("*.trace.json.gz")):
        if path.stat().st_size > BIG_TRACE:
            write_trace(path, trim(read_trace(path), 0.0, ms))
            cut.append(str(path.relative_to(artifacts)))
    manifest = artifacts / "manifest.json"
    if cut and manifest.is_file():
        doc = json.loads(manifest.read_text(encoding="utf-8"))
        doc["trimmed"] = f"traces over 1 MB cut to the first {ms:g} ms of host time (scripts/trim_trace.py): {cut}"
        manifest.write_text(json.dumps(doc, indent=1), encoding="utf-8")


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
    """One JSON line per puzzle: what `record.py catalog-summary --checks` reads."""
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
    path.parent.mkdir(parents=True, exist_ok=True)
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
