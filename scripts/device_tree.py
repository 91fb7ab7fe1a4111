#!/usr/bin/env python3
"""Keep the working tree a device call sends under its 64 MiB: leave out recorded data a call does not read.

    python3 scripts/device_tree.py size                  # MiB that would travel now (tracked + untracked-not-ignored)
    python3 scripts/device_tree.py slim [PATH ...]       # leave PATHs out of the next calls (default: SLIM)
    python3 scripts/device_tree.py restore               # track them again, exactly as before

The device tool sends the checkout's tracked files and its untracked files git does not ignore. `slim` takes the
paths out of the index (`git rm -r --cached`: the files stay on disk, untouched) and ignores them in
.git/info/exclude between two marker lines, so they do not travel; `restore` puts the index back (`git reset`) and
removes the marker lines. `slim` refuses when the index holds staged changes (a restore would unstage them) or a
slim is already in place. Commit nothing between the two: the deletions are staged while slimmed.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# recorded data no device call reads: the puzzles' artifacts (a recording writes new ones under $OUT), the ncu and
# stack fixtures (read by CPU tests here)
SLIM = ["src/perflab/catalog/*/artifacts", "tests/data/ncu", "tests/data/stacks"]
BEGIN, END = "# device_tree slim: begin", "# device_tree slim: end"
LIMIT_MIB = 64.0


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def exclude_file() -> Path:
    return ROOT / git("rev-parse", "--git-path", "info/exclude").strip()


def travelling_mib() -> float:
    names = set(git("ls-files", "-z").split("\0")) | set(git("ls-files", "-z", "-o", "--exclude-standard").split("\0"))
    return sum((ROOT / n).stat().st_size for n in names if n and (ROOT / n).is_file()) / 2**20


def slimmed() -> bool:
    path = exclude_file()
    return path.exists() and BEGIN in path.read_text()


def slim(paths: list[str]) -> int:
    if slimmed():
        print("device_tree: a slim is already in place (restore first)", file=sys.stderr)
        return 2
    if git("diff", "--cached", "--name-only").strip():
        print("device_tree: the index holds staged changes: commit or unstage them first", file=sys.stderr)
        return 2
    # a pathspec with a wildcard must match the whole path: "DIR/*" takes every file under DIR (its * crosses "/")
    specs = [p.rstrip("/") + "/*" for p in paths]
    subprocess.run(["git", "rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", *specs], cwd=ROOT, check=True)
    path = exclude_file()
    text = path.read_text() if path.exists() else ""
    lines = [BEGIN, *("/" + p.strip("/") + "/" for p in paths), END]
    path.write_text(text + ("" if not text or text.endswith("\n") else "\n") + "\n".join(lines) + "\n")
    print(f"device_tree: slimmed; {travelling_mib():.1f} MiB travel now (limit {LIMIT_MIB:g}). Restore after the call.")
    return 0


def restore() -> int:
    if not slimmed():
        print("device_tree: nothing to restore")
        return 0
    git("reset", "-q")
    path = exclude_file()
    kept, inside = [], False
    for line in path.read_text().splitlines():
        if line == BEGIN:
            inside = True
        elif line == END:
            inside = False
        elif not inside:
            kept.append(line)
    path.write_text("\n".join(kept) + ("\n" if kept else ""))
    print(f"device_tree: restored; {travelling_mib():.1f} MiB travel now")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"size", "slim", "restore"}:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    if argv[0] == "size":
        print(f"{travelling_mib():.1f} MiB travel (limit {LIMIT_MIB:g})")
        return 0
    return slim(argv[1:] or SLIM) if argv[0] == "slim" else restore()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
