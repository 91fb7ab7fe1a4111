"""Open an Nsight Systems SQLite export and read it safely, whatever its schema version.

Exports from nsys 2021 to 2026 differ: the metadata table is absent (2021), `EXPORT_META_DATA`
(2022.1 to 2023.2) or `META_DATA_EXPORT` (2023.3 on); activity tables with no rows are left out;
columns come and go (`mangledName`, `greenContextId`, `graphId`, ...). Every table and column is
therefore looked up (PRAGMA table_info) before a query names it, and a missing column is read as a
default. Text is decoded leniently (a Windows export holds Latin-1 bytes). Rows are fetched in chunks
straight into numpy arrays, so memory grows with the columns kept, not with Python objects.
"""
from __future__ import annotations

import itertools
import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from perflab.errors import UnreadableInput
from perflab.trace.nsight_systems.nsys_checks import Accounts, time_check, type_check

SQLITE_MAGIC = b"SQLite format 3\x00"
CHUNK_ROWS = 1 << 16
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# tables that only an Nsight Systems export has (StringIds alone is too generic)
_NSYS_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS", "TARGET_INFO_GPU",
                "META_DATA_EXPORT", "EXPORT_META_DATA", "ThreadNames", "OSRT_API", "TARGET_INFO_SESSION_START_TIME")


def lenient_text(raw: bytes) -> str:
    """TEXT as str: UTF-8 where it is, the bytes as Latin-1 where it is not (never an exception)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def clean(text: str) -> str:
    """Text from the file is data: control characters go (a name is shown on one line)."""
    return _CONTROL.sub("", text)


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def connect(path: str | Path) -> sqlite3.Connection:
    """Read-only connection; `immutable` also works on read-only media (no lock or journal files)."""
    path = Path(path)
    if not path.is_file():
        raise UnreadableInput(f"{path}: no such file")
    if not is_sqlite(path):
        raise UnreadableInput(f"{path}: not an SQLite file (give the export of `nsys export --type sqlite`)")
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        conn.text_factory = lenient_text
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise UnreadableInput(f"{path}: cannot read it as SQLite ({exc}); is the file complete?") from None
    return conn


@dataclass
class Schema:
    """Tables of the export and their columns, as found in the file."""

    columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    path: str = ""  # the file, for readers in other processes
    accounts: Accounts = field(default_factory=Accounts)  # what the readers could not use (nsys_checks)

    @classmethod
    def read(cls, conn: sqlite3.Connection, path: str | Path = "") -> "Schema":
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        out = {}
        for t in tables:
            try:
                out[t] = tuple(r[1] for r in conn.execute(f'PRAGMA table_info("{t}")'))
            except sqlite3.DatabaseError:
                continue
        return cls(out, str(path))

    def has(self, table: str, *columns: str) -> bool:
        cols = self.columns.get(table)
        return cols is not None and all(c in cols for c in columns)

    def first(self, table: str, *candidates: str) -> str | None:
        """The first of the candidate columns the table has."""
        cols = self.columns.get(table, ())
        return next((c for c in candidates if c in cols), None)

    @property
    def is_nsys(self) -> bool:
        return "StringIds" in self.columns and any(t in self.columns for t in _NSYS_TABLES)


def count(conn: sqlite3.Connection, schema: Schema, table: str) -> int:
    if table not in schema.columns:
        return 0
    return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])


def select_expr(schema: Schema, table: str, column: str, default: int | float) -> str:
    """`ifnull(column, default)`, or the default alone when the table has no such column."""
    if schema.has(table, column):
        return f'ifnull("{column}", {default})'
    return str(default)


def chunks(conn: sqlite3.Connection, schema: Schema, table: str, spec: dict[str, tuple[str, object, str]],
           where: str = "", chunk_rows: int = CHUNK_ROWS,
           required: tuple[str, ...] = ("start", "end")) -> Iterator[dict[str, np.ndarray]]:
    """Yield the table in chunks of numpy columns.

    spec: output name -> (source column or SQL expression, default, numpy dtype). A source naming a
    column the table lacks reads as the default; NULL reads as the default. A table without the `required`
    columns is not read, and rows whose start or end is not a number are dropped: both are counted in
    schema.accounts (nsys_checks), as are rows with text in another numeric column. A large table is read by
    several processes at once, each a range of rowids (SQLite decodes rows on one core per connection).
    """
    if table not in schema.columns:
        return
    missing = [c for c in required if not schema.has(table, c)]
    if missing:
        schema.accounts.unusable(table, count(conn, schema, table), unusable_columns(schema, table, missing))
        return
    exprs, dtype, numeric = [], [], []
    for name, (source, default, np_type) in spec.items():
        plain = bool(re.fullmatch(r"\w+", source))
        expr = select_expr(schema, table, source, default) if plain else source
        exprs.append(expr)
        dtype.append((name, np_type))
        if plain and schema.has(table, source) and source not in ("start", "end"):
            numeric.append(source)
    exprs += [time_check(), type_check(numeric)]
    dtype += [("_why", "i1"), ("_wrong", "i2")]
    sql = f'SELECT {", ".join(exprs)} FROM "{table}" WHERE ' + (f"({where}) AND " if where else "")
    record = np.dtype(dtype)
    ranges = _rowid_ranges(conn, table) if schema.path else []
    workers = read_workers()
    if len(ranges) > 1 and workers > 1:
        blocks = _parallel_blocks(schema.path, sql, record, ranges, workers)
    else:
        blocks = _blocks(conn.execute(sql + "1"), record, chunk_rows)
    for block in blocks:
        keep = schema.accounts.block(table, block["_why"], block["_wrong"])
        if not keep.all():
            block = block[keep]
        yield {name: np.ascontiguousarray(block[name]) for name in record.names if not name.startswith("_")}


def unusable_columns(schema: Schema, table: str, missing: list[str]) -> str:
    """Why a table is not read: the columns it lacks, and (briefly) what it has instead."""
    has = list(schema.columns.get(table, ()))
    shown = ", ".join(has[:8]) + (f" and {len(has) - 8} more" if len(has) > 8 else "")
    return f"no column {' or '.join(repr(c) for c in missing)} (it has {shown or 'none'})"


def read_workers() -> int:
    """Processes that read one large table at once: PERFLAB_READ_WORKERS, else the cores (at most 8)."""
    env = os.environ.get("PERFLAB_READ_WORKERS", "")
    if env.strip().isdigit():
        return max(int(env), 1)
    return min(os.cpu_count() or 1, 8)


PARALLEL_RANGE_ROWS = 1 << 20  # rowids per task: a table smaller than two of them is read in this process


def _rowid_ranges(conn: sqlite3.Connection, table: str) -> list[tuple[int, int]]:
    try:
        lo, hi = conn.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
    except sqlite3.DatabaseError:
        return []
    if lo is None or hi - lo < 2 * PARALLEL_RANGE_ROWS:
        return []
    return [(a, min(a + PARALLEL_RANGE_ROWS, hi + 1)) for a in range(lo, hi + 1, PARALLEL_RANGE_ROWS)]


def _blocks(cursor, record: np.dtype, chunk_rows: int) -> Iterator[np.ndarray]:
    while True:
        rows = cursor.fetchmany(chunk_rows)
        if not rows:
            return
        try:
            yield np.fromiter(rows, dtype=record, count=len(rows))
        except (TypeError, ValueError, OverflowError):
            # a value of the wrong type (text where a number belongs): coerce this chunk value by value
            yield np.array([tuple(_coerce(v, record[i]) for i, v in enumerate(r)) for r in rows], dtype=record)


def _read_range(path: str, sql: str, record: np.dtype, lo: int, hi: int) -> np.ndarray:
    """One rowid range of a table, in a worker process with its own read-only connection."""
    conn = connect(path)
    try:
        parts = list(_blocks(conn.execute(sql + "rowid >= ? AND rowid < ?", (lo, hi)), record, CHUNK_ROWS))
    finally:
        conn.close()
    return np.concatenate(parts) if parts else np.zeros(0, dtype=record)


def _parallel_blocks(path: str, sql: str, record: np.dtype, ranges: list[tuple[int, int]],
                     workers: int) -> Iterator[np.ndarray]:
    """The ranges read by a pool of processes, in order, with at most 2 x workers results in memory."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method)) as pool:
        pending = []
        todo = iter(ranges)
        for lo, hi in itertools.islice(todo, 2 * workers):
            pending.append(pool.submit(_read_range, path, sql, record, lo, hi))
        while pending:
            block = pending.pop(0).result()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append(pool.submit(_read_range, path, sql, record, *nxt))
            yield block


def _coerce(value, dtype: np.dtype):
    try:
        return dtype.type(value)
    except (TypeError, ValueError, OverflowError):
        return dtype.type(-1) if dtype.kind in "iu" else dtype.type(np.nan)


def strings(conn: sqlite3.Connection, schema: Schema, ids: np.ndarray) -> dict[int, str]:
    """StringIds values for the given ids (only those: the table can hold millions of NVTX texts)."""
    ids = np.unique(ids[ids >= 0])
    if ids.size == 0 or not schema.has("StringIds", "id", "value"):
        return {}
    out: dict[int, str] = {}
    step = 900  # under SQLite's limit on bound parameters
    for i in range(0, ids.size, step):
        part = ids[i:i + step].tolist()
        marks = ",".join("?" * len(part))
        for sid, value in conn.execute(f"SELECT id, value FROM StringIds WHERE id IN ({marks})", part):
            out[int(sid)] = clean(value if isinstance(value, str) else str(value))
    return out


def key_values(conn: sqlite3.Connection, schema: Schema, table: str) -> list[tuple[str, str]]:
    if not schema.has(table, "name", "value"):
        return []
    return [(str(k), "" if v is None else str(v)) for k, v in conn.execute(f'SELECT name, value FROM "{table}"')]
