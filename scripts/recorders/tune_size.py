"""Try several values of one SIZE key of a puzzle before recording it (on the GPU machine).

    record.py tune-size ID KEY VALUE [VALUE ...] [--jsonl tune.jsonl]

Each value is written into the `SIZE = {...}` line of the puzzle's workload.py (and of solution.py where it
defines its own; the starter is derived from workload.py), the fix check runs (`record.py catalog-check ID`:
the solution must pass, the starter must fail) and its JSON line, with "size": {KEY: VALUE} added, is appended
to --jsonl. The files are restored afterwards, whatever happens. Exit 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from recorders.common import REPO, record_py, run_logged

CATALOG = REPO / "src" / "perflab" / "catalog"


def main(argv: list[str], prog: str = "record.py tune-size") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("id")
    ap.add_argument("key")
    ap.add_argument("values", nargs="+", type=int)
    ap.add_argument("--jsonl", type=Path, default=Path("tune.jsonl"), help="where the tries go (appended)")
    args = ap.parse_args(argv)
    folders = sorted(CATALOG.glob(f"*-{args.id}"))
    if not folders:
        print(f"{prog}: error: no puzzle folder src/perflab/catalog/NN-{args.id}", file=sys.stderr)
        return 2
    line = re.compile(rf'^(SIZE = \{{.*"{re.escape(args.key)}": )[0-9]+', re.M)
    files = [f for f in (folders[0] / "workload.py", folders[0] / "solution.py") if f.is_file() and line.search(f.read_text())]
    if not files or files[0].name != "workload.py":
        print(f'{prog}: error: {folders[0].name}/workload.py has no integer "{args.key}" in its SIZE = {{...}} line',
              file=sys.stderr)
        return 2
    saved = {f: f.read_text() for f in files}
    try:
        for value in args.values:
            for f, text in saved.items():
                f.write_text(line.sub(lambda m: f"{m.group(1)}{value}", text))
            print(f"== {args.id} with {args.key} = {value}", flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                part = Path(tmp) / "check.jsonl"
                run_logged([*record_py("catalog-check", args.id), "--jsonl", part], Path(tmp) / "check.log",
                           10.0 ** 7, tail=12)
                rows = [json.loads(r) for r in part.read_text().splitlines() if r.strip()] if part.is_file() else []
            with args.jsonl.open("a", encoding="utf-8") as out:
                out.writelines(json.dumps({**r, "size": {args.key: value}}) + "\n" for r in rows)
    finally:
        for f, text in saved.items():
            f.write_text(text)
    print(f"tries appended to {args.jsonl}")
    return 0
