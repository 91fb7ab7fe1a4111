"""The run history: the runs `perflab run` and `perflab profile` recorded (the `runs` table of the progress
database in the user data dir, puzzles/engine/progress.py), and `run:N`, the N-th latest one's trace."""
from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.paths import user_data_dir

HISTORY_REF = re.compile(r"run:(\d+)")
BUSY_TIMEOUT_S = 30.0
RUN_KEYS = ("ts", "puzzle", "variant", "mode", "path", "step_time_ms")


def db_path() -> Path:
    return user_data_dir() / "progress.sqlite3"


def trace_file(folder: Path, variant: str) -> Path:
    """A run folder's trace of one variant."""
    return Path(folder) / f"{variant}.trace.json.gz"


def select_runs(conn: sqlite3.Connection, puzzle: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """The latest runs first (of one puzzle, with `puzzle`)."""
    sql = f"SELECT {', '.join(RUN_KEYS)} FROM runs"
    args: tuple = ()
    if puzzle:
        sql, args = sql + " WHERE puzzle = ?", (puzzle,)
    rows = conn.execute(sql + " ORDER BY id DESC LIMIT ?", (*args, limit)).fetchall()
    return [dict(zip(RUN_KEYS, r)) for r in rows]


def runs_with_trace() -> int:
    """How many recorded runs kept a trace (what run:N can name)."""
    if not db_path().exists():
        return 0
    try:
        with closing(sqlite3.connect(db_path(), timeout=BUSY_TIMEOUT_S)) as conn:
            return int(conn.execute("SELECT count(*) FROM runs WHERE path IS NOT NULL AND path != ''").fetchone()[0])
    except sqlite3.DatabaseError:
        return 0


def resolve(ref: str | Path) -> tuple[Path, str]:
    """A path to diff and its label: an existing path as is; `run:N` from the run history."""
    text = str(ref)
    path = Path(ref)
    if path.exists():
        return path, text
    m = HISTORY_REF.fullmatch(text)
    if not m:
        raise PerflabError(f"{text}: no such file or folder (give a trace, a folder of per-rank traces, "
                           "or run:N for the N-th latest recorded run)")
    n = int(m.group(1))
    if n < 1:
        raise PerflabError(f"{text}: runs are counted from 1 (run:1 is the latest)")
    if not db_path().exists():
        raise PerflabError(f"{text}: no run history yet (`perflab profile -- CMD`, or `perflab run PUZZLE` on a GPU, "
                           "records runs); give trace paths")
    with closing(sqlite3.connect(db_path(), timeout=BUSY_TIMEOUT_S)) as conn:
        runs = [r for r in select_runs(conn, limit=max(200, n)) if r.get("path")]
    if len(runs) < n:
        raise PerflabError(f"{text}: the run history has {len(runs)} recorded run(s) with a trace "
                           "(replays keep none); give trace paths")
    r = runs[n - 1]
    # `perflab profile` keeps its run's folder (one trace, or one per rank); `perflab run` a variant's trace
    trace = Path(r["path"]) if r["mode"] == "profile" else trace_file(Path(r["path"]), r["variant"])
    if not trace.exists():
        raise PerflabError(f"{text}: its trace {trace} is gone")
    return trace, f"{text} ({r['puzzle']} {r['variant']})"
