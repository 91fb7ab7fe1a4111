"""Progress and run history (perflab/history.py reads the runs): SQLite in WAL mode in the user data dir.

Several perflab processes may write at once: every write is one short IMMEDIATE transaction and
waits on a busy timeout instead of failing.
"""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.history import BUSY_TIMEOUT_S, db_path, select_runs

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, ts REAL NOT NULL, puzzle TEXT NOT NULL, kind TEXT NOT NULL,
    key TEXT, value TEXT, ok INTEGER, detail TEXT);
CREATE INDEX IF NOT EXISTS events_puzzle ON events (puzzle, kind);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, ts REAL NOT NULL, puzzle TEXT NOT NULL, variant TEXT NOT NULL,
    mode TEXT NOT NULL, path TEXT, step_time_ms REAL, detail TEXT);
"""


@dataclass
class PuzzleStatus:
    puzzle: str
    right: set[str] = field(default_factory=set)   # question keys answered right at least once
    wrong: int = 0                                  # wrong answers given
    hints: int = 0                                  # highest hint shown
    checked: bool = False                           # a fix check passed
    checks: int = 0
    runs: int = 0
    solution_seen: bool = False
    revealed: set[str] = field(default_factory=set)  # question keys whose value was shown (answer --reveal)

    def diagnosed(self, keys: list[str]) -> bool:
        return bool(keys) and set(keys) <= self.right

    def label(self, keys: list[str]) -> str:
        diagnosed = self.diagnosed(keys)
        shown = len(self.revealed & set(keys))
        if diagnosed:
            word = "solved" if self.checked else "diagnosed"
            return f"{word} ({shown} revealed)" if shown else word
        return "fixed" if self.checked else ""

    def to_dict(self, keys: list[str], hints: int) -> dict[str, Any]:
        return {"id": self.puzzle, "questions": len(keys), "right": sorted(self.right & set(keys)),
                "revealed": sorted(self.revealed & set(keys)), "wrong_answers": self.wrong,
                "hints_seen": self.hints, "hints": hints, "checks": self.checks, "check_passed": self.checked,
                "runs": self.runs, "solution_seen": self.solution_seen, "status": self.label(keys)}


class ProgressDB:
    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else db_path()
        try:
            self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self._init()
        except sqlite3.Error as exc:
            raise PerflabError(f"progress database {self.path} unusable ({exc}); move it away to start afresh") \
                from None

    def _init(self) -> None:
        # Switching to WAL takes a lock without always honouring the busy handler: retry briefly.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self.conn.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        self.conn.execute("PRAGMA synchronous = NORMAL")
        if self.conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            with self._write() as c:
                c.executescript("BEGIN IMMEDIATE;" + _SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")

    def _write(self) -> _Transaction:
        return _Transaction(self.conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ProgressDB:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def add_event(self, puzzle: str, kind: str, key: str | None = None, value: str | None = None,
                  ok: bool | None = None, detail: dict | None = None) -> None:
        with self._write() as c:
            c.execute("BEGIN IMMEDIATE")
            c.execute("INSERT INTO events (ts, puzzle, kind, key, value, ok, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (time.time(), puzzle, kind, key, value, None if ok is None else int(ok),
                       json.dumps(detail) if detail is not None else None))
            c.execute("COMMIT")

    def add_run(self, puzzle: str, variant: str, mode: str, path: str | None, step_time_ms: float | None,
                detail: dict | None = None) -> None:
        with self._write() as c:
            c.execute("BEGIN IMMEDIATE")
            c.execute("INSERT INTO runs (ts, puzzle, variant, mode, path, step_time_ms, detail) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (time.time(), puzzle, variant, mode, path, step_time_ms,
                       json.dumps(detail) if detail is not None else None))
            c.execute("COMMIT")

    def hints_seen(self, puzzle: str) -> int:
        row = self.conn.execute("SELECT MAX(CAST(key AS INTEGER)) FROM events WHERE puzzle = ? AND kind = 'hint'",
                                (puzzle,)).fetchone()
        return int(row[0] or 0)

    def statuses(self) -> dict[str, PuzzleStatus]:
        out: dict[str, PuzzleStatus] = {}

        def get(pid: str) -> PuzzleStatus:
            return out.setdefault(pid, PuzzleStatus(pid))

        for pid, kind, key, ok, n in self.conn.execute(
                "SELECT puzzle, kind, key, ok, COUNT(*) FROM events GROUP BY puzzle, kind, key, ok"):
            st = get(pid)
            if kind == "answer":
                if ok:
                    st.right.add(key)
                else:
                    st.wrong += n
            elif kind == "hint":
                st.hints = max(st.hints, int(key or 0))
            elif kind == "check":
                st.checks += n
                st.checked = st.checked or bool(ok)
            elif kind == "solution":
                st.solution_seen = True
            elif kind == "reveal":
                st.revealed.add(key)
        for pid, n in self.conn.execute("SELECT puzzle, COUNT(*) FROM runs GROUP BY puzzle"):
            get(pid).runs = n
        return out

    def runs(self, puzzle: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        return select_runs(self.conn, puzzle, limit)

    def reset(self) -> None:
        with self._write() as c:
            c.execute("BEGIN IMMEDIATE")
            c.execute("DELETE FROM events")
            c.execute("DELETE FROM runs")
            c.execute("COMMIT")


class _Transaction:
    """Rolls back an open transaction when the body fails, so a busy error never leaves a lock held."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and self.conn.in_transaction:
            self.conn.rollback()
        if isinstance(exc, sqlite3.Error):
            raise PerflabError(f"progress database busy or broken ({exc}); try again") from None
