"""The loaded trace model as DuckDB tables and views: custom queries over either format.

    from perflab.analysis.reports.sql_views import open_db
    db = open_db("report.sqlite")               # or a Kineto trace, or loaded Trace(s)
    db.query("SELECT name, sum(dur_ns) FROM kernels GROUP BY 1 ORDER BY 2 DESC LIMIT 5")

The schema is the same for an Nsight Systems export and a Kineto trace (documented in VIEWS and in
docs/sql.md): one `events` view over every row, and views per kind. The numpy columns are handed to
DuckDB without copying. DuckDB is optional (`pip install 'perflab[sql]'`).

Queries run in DuckDB's own sandbox: once the views exist, the connection gets `enable_external_access=false`
(no file is read or written: COPY, EXPORT, ATTACH, read_*(), glob(), INSTALL all refused; no Python variables
scanned) and `lock_configuration=true` (no SET, PRAGMA or RESET can undo it, or point the profiler's or query
log's output at a file). Spilled intermediate results go to a private temporary folder, removed with the
connection. Whatever a query yields is written by perflab (perflab.report.sql_output), never by DuckDB.
"""
from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path
from typing import NamedTuple

import numpy as np

from perflab.errors import PerflabError
from perflab.trace.model import KIND_NAMES, Trace

VIEWS = {
    "events": "every row: id, rank, kind (kernel, memcpy, memset, runtime, cuda_sync, user_annotation, cpu_op, "
              "python_function, gpu_user_annotation, other), category, name, start_ns, end_ns, dur_ns, pid, tid, "
              "device, stream, correlation, bytes, grid (blocks), block (threads), context, graph_id, registers, "
              "shared_mem, is_sync (a host call that waits for the GPU), launches (a call that launched GPU work), "
              "direction and pageable (copies), launch_id (GPU rows: the id of the call "
              "that launched them). Times in ns as the file records them (nsys: since the session start; Kineto: "
              "its µs x 1000); NULL where a format has no value",
    "kernels": "kernel rows: id, rank, name, start_ns, end_ns, dur_ns, device, stream, correlation, grid, block, "
               "registers, shared_mem, context, graph_id, pid, launch_id",
    "memcpy": "copy rows: id, rank, name, direction (h2d, d2h, d2d, other), pageable, start_ns, end_ns, dur_ns, "
              "bytes, gbps, device, stream, correlation, launch_id",
    "memset": "memset rows: id, rank, name, start_ns, end_ns, dur_ns, bytes, device, stream, correlation, launch_id",
    "gpu_ops": "kernels, copies and memsets with the call that launched them: id, rank, kind, name, start_ns, end_ns, "
               "dur_ns, device, stream, launch_id, launch_name, launch_start_ns, launch_tid, queued_ns (GPU start "
               "- launch call start)",
    "api": "CUDA runtime and driver calls: id, rank, category (cuda_runtime, cuda_driver), name, start_ns, end_ns, "
           "dur_ns, pid, tid, correlation, is_sync, launches (it launched GPU work)",
    "sync": "CUDA synchronization records: id, rank, name (Context Sync, Stream Sync, Event Sync, Stream Wait Event), "
            "start_ns, end_ns, dur_ns, device, stream, correlation",
    "nvtx": "ranges: NVTX (nsys) or record_function (Kineto) user annotations: id, rank, name, start_ns, end_ns, "
            "dur_ns, pid, tid",
    "cpu_ops": "operator rows (Kineto cpu_op; PyTorch's NVTX operator ranges in nsys): id, rank, name, start_ns, "
               "end_ns, dur_ns, pid, tid",
    "os_runtime": "OS runtime calls (nsys --trace=osrt): id, rank, name, start_ns, end_ns, dur_ns, pid, tid, "
                  "in_cuda_call (made inside a CUDA call on the same thread)",
    "steps": "steps (ProfilerStep#N ranges, or the NVTX ranges read as steps): rank, step, start_ns, end_ns, dur_ns",
    "devices": "GPUs: rank, id, name, sms, cc_major, cc_minor, memory_bytes",
    "meta": "facts about each loaded trace: rank, key, value (source, path, device, nsys_version, export_schema)",
    "notes": "what the profiler dropped or warned about, and launches with no GPU record: rank, note",
}


def _duckdb():
    try:
        import duckdb
    except ImportError:
        raise PerflabError("perflab sql needs DuckDB: pip install 'perflab[sql]' (or pip install duckdb)") from None
    return duckdb


def _nullable(values: np.ndarray, missing) -> np.ndarray | np.ma.MaskedArray:
    return np.ma.masked_array(values, mask=values == missing) if (values == missing).any() else values


class Result(NamedTuple):
    """A query's result: column names, DuckDB's type of each, the rows fetched, and whether more were left."""

    columns: list[str]
    types: list[str]
    rows: list[tuple]
    more: bool


class TraceDB:
    """A DuckDB connection over loaded traces (kept alive with the numpy columns it reads), sandboxed: the
    views are all a query can read, and it writes nothing."""

    def __init__(self, traces: list[Trace]) -> None:
        self.duckdb = _duckdb()
        self.con = self.duckdb.connect()
        self.traces = traces
        self._tables: list[dict] = []
        for rank, trace in enumerate(traces):
            self._register(rank, trace)
        self._views()
        self._sandbox()

    def _sandbox(self) -> None:
        spill = tempfile.mkdtemp(prefix="perflab-sql-")
        weakref.finalize(self, _close, self.con, spill)
        quoted = "'" + spill.replace("'", "''") + "'"
        for key, value in (("temp_directory", quoted), ("autoinstall_known_extensions", "false"),
                           ("autoload_known_extensions", "false"), ("python_enable_replacements", "false"),
                           ("enable_external_access", "false"), ("lock_configuration", "true")):  # the lock last
            self.con.execute(f"SET {key} = {value}")

    def query(self, sql: str) -> tuple[list[str], list[tuple]]:
        result = self.fetch(sql)
        return result.columns, result.rows

    def fetch(self, sql: str, limit: int | None = None) -> "Result":
        """The last statement's result, at most `limit` rows fetched (None: all)."""
        try:
            rel = self.con.execute(sql)
            desc = rel.description or []
            cols, types = [d[0] for d in desc], [str(d[1]) for d in desc]
            if limit is None:
                return Result(cols, types, rel.fetchall(), False)
            rows = rel.fetchmany(limit + 1)
            return Result(cols, types, rows[:limit], len(rows) > limit)
        except self.duckdb.Error as exc:
            raise PerflabError(sql_error(exc)) from None

    def sql(self, sql: str):
        """The DuckDB relation (to_df(), fetchall(), show(), ...)."""
        return self.con.sql(sql)

    def _register(self, rank: int, t: Trace) -> None:
        from perflab.analysis.steps.links import launch_of, launch_rows
        from perflab.analysis.idle.memcpy import direction, is_pageable
        from perflab.analysis.idle.syncs import sync_rows
        from perflab.analysis.steps.windows import profiler_steps

        n = len(t)
        is_sync = np.zeros(n, dtype=bool)
        is_sync[sync_rows(t)] = True
        launches = np.zeros(n, dtype=bool)
        launches[launch_rows(t)] = True
        extra = t.extra
        pid = extra.get("pid", np.full(n, t.meta.get("pid", -1), np.int32))
        events = {
            "id": np.arange(n, dtype=np.int64), "rank": np.full(n, rank, np.int32), "kind_id": t.kind.astype(np.int16),
            "cat_id": t.cat.astype(np.int32), "name_id": t.name.astype(np.int64),
            "start_ns": np.round(t.ts * 1e3).astype(np.int64), "end_ns": np.round(t.end * 1e3).astype(np.int64),
            "dur_ns": np.round(t.dur * 1e3).astype(np.int64), "pid": pid, "tid": t.tid,
            "device": _nullable(t.device, -1), "stream": _nullable(t.stream, -1),
            "correlation": _nullable(t.correlation, -1),
            "bytes": np.ma.masked_invalid(t.nbytes), "grid": _nullable(t.grid, -1), "block": _nullable(t.block, -1),
            "is_sync": is_sync, "launches": launches, "launch_id": _nullable(launch_of(t), -1),
        }
        for key in ("context", "graph_id", "registers", "shared_mem"):
            events[key] = _nullable(extra[key], -1) if key in extra else np.ma.masked_all(n, dtype=np.int64)
        names = {"name_id": np.arange(len(t.names), dtype=np.int64), "name": np.array(t.names, dtype=object),
                 "direction": np.array([direction(x) for x in t.names], dtype=object),
                 "pageable": np.array([is_pageable(x) for x in t.names], dtype=bool)}
        cats = {"cat_id": np.arange(len(t.cats), dtype=np.int32), "category": np.array(t.cats, dtype=object)}
        steps = profiler_steps(t)
        step_tab = {"rank": np.full(len(steps), rank, np.int32), "step": steps.number.astype(np.int64),
                    "start_ns": np.round(steps.start * 1e3).astype(np.int64),
                    "end_ns": np.round(steps.end * 1e3).astype(np.int64)}
        props = t.meta.get("device_properties") or []
        devices = {"rank": np.full(len(props), rank, np.int32),
                   "id": np.array([int(p.get("id", -1) or 0) for p in props], np.int64),
                   "name": np.array([str(p.get("name", "")) for p in props], dtype=object),
                   "sms": np.array([int(p.get("numSms") or 0) for p in props], np.int64),
                   "cc_major": np.array([int(p.get("computeMajor") or 0) for p in props], np.int64),
                   "cc_minor": np.array([int(p.get("computeMinor") or 0) for p in props], np.int64),
                   "memory_bytes": np.array([int(p.get("totalGlobalMem") or 0) for p in props], np.int64)}
        meta = self._meta(t)
        from perflab.analysis.steps.records import trace_notes

        notes = trace_notes(t)
        tables = {"events": events, "names": names, "cats": cats, "steps": step_tab, "devices": devices,
                  "meta": {"rank": np.full(len(meta), rank, np.int32), "key": np.array(list(meta), dtype=object),
                           "value": np.array(list(meta.values()), dtype=object)},
                  "notes": {"rank": np.full(len(notes), rank, np.int32), "note": np.array(notes, dtype=object)}}
        for name, cols in tables.items():
            self.con.register(f"_{name}_{rank}", cols)
        self._tables.append(tables)

    @staticmethod
    def _meta(t: Trace) -> dict[str, str]:
        cap = (t.meta.get("capture") or {}).get("export") or {}
        out = {"source": str(t.meta.get("source", "kineto")), "path": str(t.meta.get("path", "")),
               "device": str(t.meta.get("device_name", "")), "events": str(len(t))}
        if cap:
            out.update(nsys_version=str(cap.get("nsys_version")), export_schema=str(cap.get("schema_version")))
        return out

    def _views(self) -> None:
        ranks = range(len(self.traces))

        def union(name: str) -> str:
            return " UNION ALL ".join(f"SELECT * FROM _{name}_{r}" for r in ranks)

        kinds = ", ".join(f"({i}, '{k}')" for i, k in enumerate(KIND_NAMES))
        self.con.execute(f"CREATE TEMP TABLE _kinds(kind_id SMALLINT, kind VARCHAR); INSERT INTO _kinds VALUES {kinds}")
        self.con.execute(
            "CREATE TEMP VIEW events AS SELECT e.id, e.rank, k.kind, c.category, n.name, e.start_ns, e.end_ns, "
            "e.dur_ns, e.pid, e.tid, e.device, e.stream, e.correlation, CAST(e.bytes AS BIGINT) AS bytes, e.grid, "
            "e.block, e.context, e.graph_id, e.registers, e.shared_mem, e.is_sync, e.launches, e.launch_id, n.direction, "
            f"n.pageable FROM ({union('events')}) e JOIN _kinds k USING (kind_id) "
            f"JOIN ({' UNION ALL '.join(f'SELECT {r} AS rank, * FROM _names_{r}' for r in ranks)}) n "
            "ON n.rank = e.rank AND n.name_id = e.name_id "
            f"JOIN ({' UNION ALL '.join(f'SELECT {r} AS rank, * FROM _cats_{r}' for r in ranks)}) c "
            "ON c.rank = e.rank AND c.cat_id = e.cat_id")
        views = {
            "kernels": "SELECT id, rank, name, start_ns, end_ns, dur_ns, device, stream, correlation, grid, block, "
                       "registers, shared_mem, context, graph_id, pid, launch_id FROM events WHERE kind = 'kernel'",
            "memcpy": "SELECT id, rank, name, direction, pageable, start_ns, end_ns, dur_ns, bytes, "
                      "CASE WHEN dur_ns > 0 THEN bytes / dur_ns END AS gbps, device, stream, correlation, launch_id "
                      "FROM events WHERE kind = 'memcpy'",
            "memset": "SELECT id, rank, name, start_ns, end_ns, dur_ns, bytes, device, stream, correlation, launch_id "
                      "FROM events WHERE kind = 'memset'",
            "api": "SELECT id, rank, category, name, start_ns, end_ns, dur_ns, pid, tid, correlation, is_sync, launches "
                   "FROM events WHERE kind = 'runtime'",
            "gpu_ops": "SELECT g.id, g.rank, g.kind, g.name, g.start_ns, g.end_ns, g.dur_ns, g.device, g.stream, "
                       "g.launch_id, l.name AS launch_name, l.start_ns AS launch_start_ns, l.tid AS launch_tid, "
                       "g.start_ns - l.start_ns AS queued_ns FROM events g LEFT JOIN events l "
                       "ON l.id = g.launch_id AND l.rank = g.rank WHERE g.kind IN ('kernel', 'memcpy', 'memset')",
            "sync": "SELECT id, rank, name, start_ns, end_ns, dur_ns, device, stream, correlation FROM events "
                    "WHERE kind = 'cuda_sync'",
            "nvtx": "SELECT id, rank, name, start_ns, end_ns, dur_ns, pid, tid FROM events "
                    "WHERE kind = 'user_annotation'",
            "cpu_ops": "SELECT id, rank, name, start_ns, end_ns, dur_ns, pid, tid FROM events "
                       "WHERE kind = 'cpu_op' AND category <> 'os_runtime'",
            "os_runtime": "SELECT id, rank, name, start_ns, end_ns, dur_ns, pid, tid, kind = 'other' AS in_cuda_call "
                          "FROM events WHERE category = 'os_runtime'",
            "steps": f"SELECT rank, step, start_ns, end_ns, end_ns - start_ns AS dur_ns FROM ({union('steps')})",
            "devices": f"SELECT * FROM ({union('devices')})",
            "meta": f"SELECT * FROM ({union('meta')})",
            "notes": f"SELECT * FROM ({union('notes')})",
        }
        for name, body in views.items():
            self.con.execute(f"CREATE TEMP VIEW {name} AS {body}")


def _close(con, spill: str) -> None:
    try:
        con.close()
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def sql_error(exc: Exception) -> str:
    """DuckDB's first line, and for what the sandbox refused, what perflab sql offers instead."""
    first = " ".join(str(exc).split("\n", 1)[0].split())
    if type(exc).__name__ == "PermissionException" or "configuration has been locked" in first:
        return (f"SQL error: {first} (perflab sql runs the query in DuckDB's sandbox: it reads only the trace's "
                "views and writes no file; write a result with --out FILE.csv|.json|.parquet)")
    return f"SQL error: {first}"


def open_db(source: str | Path | Trace | list[Trace], *, nvtx_steps: str | None = "auto") -> TraceDB:
    """A TraceDB over a trace file (any timeline perflab reads), a loaded Trace, or several (ranks)."""
    _duckdb()
    if isinstance(source, Trace):
        return TraceDB([source])
    if isinstance(source, list):
        return TraceDB(source)
    from perflab.trace import sniff
    from perflab.trace.loader import load_timeline, load_timeline_ranks

    path = Path(source)
    if sniff.sniff(path) == sniff.KINETO_DIR:
        return TraceDB(load_timeline_ranks(path, nvtx_steps=nvtx_steps))
    return TraceDB([load_timeline(path, nvtx_steps=nvtx_steps)])
