"""The activity tables of an Nsight Systems export, each read in chunks into the trace model's columns.

Every chunk is a dict of model columns (see `perflab.trace.model.Trace`) plus `code`: the row's name
in the table's own code space (a StringIds id, or a memcpy/memset/sync kind), turned into a model
name id once every table is read (`nsys.load`). Times are nanoseconds in the file, µs in the model.
Correlation ids are made unique per process: pid << 32 | correlationId (CUPTI ids are per process).
"""
from __future__ import annotations

import re
import sqlite3
from typing import Iterator

import numpy as np

from perflab.trace.model import CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC, USER_ANNOTATION
from perflab.trace.nsight_systems.nsys_checks import TIME_REASONS
from perflab.trace.nsight_systems.nsys_db import CHUNK_ROWS, Schema, chunks, count, unusable_columns

KERNEL_T, MEMCPY_T, MEMSET_T = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_T = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"  # --cuda-graph-trace=graph: one row per graph launch
RUNTIME_T, SYNC_T = "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX_T, OSRT_T = "NVTX_EVENTS", "OSRT_API"

CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cuda_sync", "user_annotation",
              "cpu_op", "os_runtime")
CAT = {c: i for i, c in enumerate(CATEGORIES)}
DRIVER_EVENT_CLASS = 1      # ENUM_NSYS_EVENT_CLASS: 0 CUDA runtime, 1 CUDA driver, 67 CUDA backtrace (a duplicate)
NVTX_RANGES = (59, 60, 70, 71)  # ENUM_NSYS_EVENT_TYPE: NVTX(T) push/pop and start/end ranges
NVTX_STYLE = {59: "PushPop", 60: "StartEnd", 70: "PushPop", 71: "StartEnd"}

# CUPTI names, as Kineto writes them (analysis/idle/memcpy.py parses "Memcpy HtoD (Pageable -> Device)").
COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
             9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
UNIFIED_KINDS = (11, 12, 13)  # nsys's own kinds: Unified Memory migrations
# ENUM_CUDA_MEM_KIND, the same numbering in every export here (HtoD rows read Pageable=0 -> Device=2 from 2021 on)
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
            6: "Managed Static", 7: "Unknown"}
_SYNC_BY_CALL = (("StreamWaitEvent", "Stream Wait Event"), ("StreamSynchronize", "Stream Sync"),
                 ("Event", "Event Sync"), ("Synchronize", "Context Sync"))
# what nsys stats calls each copy kind ("[CUDA memcpy Host-to-Device]"), from ENUM_CUDA_MEMCPY_OPER's labels
COPY_LABEL = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host",
              5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device",
              9: "Host-to-Host", 10: "Peer-to-Peer", 11: "Unified Host-to-Device", 12: "Unified Device-to-Host",
              13: "Unified Device-to-Device"}

_API_SUFFIX = re.compile(r"_v\d{4,5}$")  # cudaLaunchKernel_v7000 (CUPTI's callback id names); cuMemAlloc_v2 stays


def api_name(raw: str) -> str:
    return _API_SUFFIX.sub("", raw)


def copy_name(code: int) -> str:
    kind, src, dst = code >> 16, (code >> 8) & 0xFF, code & 0xFF
    if kind in UNIFIED_KINDS:
        return f"Memcpy {COPY_KIND[kind]} (Unified Memory)"
    return f"Memcpy {COPY_KIND.get(kind, 'Unknown')} ({MEM_KIND.get(src, 'Unknown')} -> {MEM_KIND.get(dst, 'Unknown')})"


def memset_name(code: int) -> str:
    return f"Memset ({MEM_KIND.get(code, 'Unknown')})"


def sync_name(call: str) -> str:
    """Kineto's names for CUDA synchronization records, from the API call that waited."""
    return next((label for key, label in _SYNC_BY_CALL if key in call), f"Sync ({call})")


def pid_of(global_id: np.ndarray) -> np.ndarray:
    """The OS process id inside a serialized GlobalId (globalTid or globalPid)."""
    return ((global_id >> 24) & 0xFFFFFF).astype(np.int32)


def tid_of(global_tid: np.ndarray) -> np.ndarray:
    return (global_tid & 0xFFFFFF).astype(np.int32)


def unique_correlation(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """CUPTI correlation ids are per process; 0 or missing means none (-1)."""
    ok = corr > 0
    return np.where(ok, (pid.astype(np.int64) << 32) | (corr & 0xFFFFFFFF), -1)


def _base(block: dict, n: int, kind: int, cat: str, code: np.ndarray) -> dict:
    """The columns every row has. A chunk holds only columns with values: the rest take their defaults when
    the trace is assembled (nsys.COLUMNS), which keeps a large export's peak memory near the model's."""
    ts = block["start"].astype(np.float64) / 1e3
    dur = (block["end"] - block["start"]).astype(np.float64) / 1e3
    return {"kind": np.full(n, kind, np.int8), "cat": np.full(n, CAT[cat], np.int16), "code": code.astype(np.int64),
            "ts": ts, "dur": dur}


def _optional(out: dict, **columns: np.ndarray) -> None:
    """Keep a column only when some row of the chunk has a value (-1 is none)."""
    for key, values in columns.items():
        if (values != -1).any():
            out[key] = values


def _gpu(block: dict, n: int, kind: int, cat: str, code: np.ndarray, nbytes: np.ndarray | None) -> dict:
    pid = pid_of(block["gpid"])
    out = _base(block, n, kind, cat, code)
    stream = np.where(block["stream"] == 0xFFFFFFFF, -1, block["stream"])  # a context-wide sync has none
    out.update(tid=stream.astype(np.int32), stream=stream.astype(np.int32), device=block["device"].astype(np.int32),
               correlation=unique_correlation(pid, block["corr"]), x_pid=pid,
               x_context=block["context"].astype(np.int32))
    if nbytes is not None:
        out["nbytes"] = nbytes.astype(np.float64)
    return out


def _host(block: dict, n: int, kind: int, cat: str, code: np.ndarray) -> dict:
    pid = pid_of(block["gtid"])
    out = _base(block, n, kind, cat, code)
    out.update(tid=tid_of(block["gtid"]), x_pid=pid)
    if "corr" in block:
        out["correlation"] = unique_correlation(pid, block["corr"])
    return out


_GPU_SPEC = {"start": ("start", 0, "i8"), "end": ("end", 0, "i8"), "device": ("deviceId", -1, "i8"),
             "context": ("contextId", -1, "i8"), "stream": ("streamId", -1, "i8"), "corr": ("correlationId", -1, "i8"),
             "gpid": ("globalPid", 0, "i8")}


def kernels(conn: sqlite3.Connection, schema: Schema, chunk_rows: int = CHUNK_ROWS) -> Iterator[dict]:
    t = KERNEL_T
    name_col = schema.first(t, "demangledName", "shortName")
    if name_col is None:
        if t in schema.columns:
            schema.accounts.unusable(t, count(conn, schema, t), unusable_columns(schema, t, ["demangledName", "shortName"]))
        return
    dims = all(schema.has(t, c) for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"))
    smem = " + ".join(f'ifnull("{c}", 0)' for c in ("staticSharedMemory", "dynamicSharedMemory") if schema.has(t, c))
    spec = {**_GPU_SPEC, "name": (name_col, -1, "i8"),
            "grid": ('"gridX" * "gridY" * "gridZ"' if dims else "gridX", -1, "i8"),
            "block": ('"blockX" * "blockY" * "blockZ"' if dims else "blockX", -1, "i8"),
            "regs": ("registersPerThread", -1, "i4"), "smem": (smem or "staticSharedMemory", -1, "i8"),
            "graph": ("graphId", -1, "i8"), "node": ("graphNodeId", -1, "i8")}
    for b in chunks(conn, schema, t, spec, chunk_rows=chunk_rows):
        n = b["start"].size
        out = _gpu(b, n, KERNEL, "kernel", b["name"], None)
        out.update(grid=b["grid"], block=b["block"], x_registers=np.clip(b["regs"], -1, 32767).astype(np.int16),
                   x_shared_mem=np.clip(b["smem"], -1, 2**31 - 1).astype(np.int32))
        _optional(out, x_graph_id=b["graph"], x_graph_node=b["node"])
        yield out


def graphs(conn: sqlite3.Connection, schema: Schema, chunk_rows: int = CHUNK_ROWS) -> Iterator[dict]:
    """Whole CUDA graph launches (nsys traces graphs as one row each unless --cuda-graph-trace=node): GPU work
    of kind KERNEL named "Graph Exec N", as nsys shows them."""
    spec = {**_GPU_SPEC, "graph": ("graphId", -1, "i8"), "exec": ("graphExecId", -1, "i8")}
    for b in chunks(conn, schema, GRAPH_T, spec, chunk_rows=chunk_rows):
        n = b["start"].size
        out = _gpu(b, n, KERNEL, "kernel", b["exec"], None)
        _optional(out, x_graph_id=b["graph"])
        yield out


def memcpys(conn: sqlite3.Connection, schema: Schema, chunk_rows: int = CHUNK_ROWS) -> Iterator[dict]:
    spec = {**_GPU_SPEC, "bytes": ("bytes", 0, "i8"), "copy": ("copyKind", 0, "i8"), "src": ("srcKind", 7, "i8"),
            "dst": ("dstKind", 7, "i8"), "node": ("graphNodeId", -1, "i8")}
    for b in chunks(conn, schema, MEMCPY_T, spec, chunk_rows=chunk_rows):
        n = b["start"].size
        code = (b["copy"].clip(0, 255) << 16) | (b["src"].clip(0, 255) << 8) | b["dst"].clip(0, 255)
        out = _gpu(b, n, MEMCPY, "gpu_memcpy", code, b["bytes"])
        _optional(out, x_graph_node=b["node"])
        yield out


def memsets(conn: sqlite3.Connection, schema: Schema, chunk_rows: int = CHUNK_ROWS) -> Iterator[dict]:
    spec = {**_GPU_SPEC, "bytes": ("bytes", 0, "i8"), "mem": ("memKind", 7, "i8"), "node": ("graphNodeId", -1, "i8")}
    for b in chunks(conn, schema, MEMSET_T, spec, chunk_rows=chunk_rows):
        n = b["start"].size
        out = _gpu(b, n, MEMSET, "gpu_memset", b["mem"].clip(0, 255), b["bytes"])
        _optional(out, x_graph_node=b["node"])
        yield out


def syncs(conn: sqlite3.Connection, schema: Schema, chunk_rows: int = CHUNK_ROWS) -> Iterator[dict]:
    spec = {**_GPU_SPEC, "type": ("syncType", 0, "i8")}
    for b in chunks(conn, schema, SYNC_T, spec, chunk_rows=chunk_rows):
        n = b["start"].size
        yield _gpu(b, n, SYNC, "cuda_sync", b["type"], None)


def api_calls(conn: sqlite3.Connection, schema: Schema, chunk_rows: int = CHUNK_ROWS) -> Iterator[dict]:
    """CUDA runtime and driver calls (cat cuda_runtime / cuda_driver); `klass` keeps the event class
    for de-duplication (`dedupe_api`)."""
    spec = {"start": ("start", 0, "i8"), "end": ("end", 0, "i8"), "gtid": ("globalTid", 0, "i8"),
            "corr": ("correlationId", -1, "i8"), "name": ("nameId", -1, "i8"), "klass": ("eventClass", 0, "i8")}
    for b in chunks(conn, schema, RUNTIME_T, spec, chunk_rows=chunk_rows, required=("start", "end", "nameId")):
        n = b["start"].size
        out = _host(b, n, RUNTIME, "cuda_runtime", b["name"])
        out["cat"] = np.where(b["klass"] == DRIVER_EVENT_CLASS, CAT["cuda_driver"], CAT["cuda_runtime"]).astype(np.int16)
        out["klass"] = b["klass"].astype(np.int8)
        yield out


def dedupe_api(part: dict) -> tuple[dict, int]:
    """One row per (process, correlation id): some exports list each call twice (a runtime row and a
    'CUDA backtrace' row). The runtime row wins, then the driver row. Returns (kept rows, dropped)."""
    corr = part["correlation"]
    klass = part.pop("klass")
    has = np.flatnonzero(corr >= 0)
    if has.size == 0:
        return part, 0
    pref = np.where(klass[has] == 0, 0, np.where(klass[has] == DRIVER_EVENT_CLASS, 1, 2))
    order = has[np.lexsort((pref, corr[has]))]
    dup = np.zeros(corr.size, dtype=bool)
    dup[order[1:]] = corr[order[1:]] == corr[order[:-1]]
    dropped = int(dup.sum())
    if dropped:
        part = {k: v[~dup] for k, v in part.items()}
    return part, dropped


def os_calls(conn: sqlite3.Connection, schema: Schema, chunk_rows: int = CHUNK_ROWS) -> Iterator[dict]:
    """OS runtime calls (poll, pthread_cond_wait, read, ...): host waits, as CPU ops of cat os_runtime."""
    spec = {"start": ("start", 0, "i8"), "end": ("end", 0, "i8"), "gtid": ("globalTid", 0, "i8"),
            "name": ("nameId", -1, "i8")}
    for b in chunks(conn, schema, OSRT_T, spec, chunk_rows=chunk_rows, required=("start", "end", "nameId")):
        n = b["start"].size
        yield _host(b, n, CPU_OP, "os_runtime", b["name"])


def nvtx_ranges(conn: sqlite3.Connection, schema: Schema, texts: dict[str, int],
                chunk_rows: int = CHUNK_ROWS) -> Iterator[dict]:
    """NVTX push/pop and start/end ranges as user annotations. `texts` interns the inline texts: their
    code is -2 - index (registered strings keep their StringIds id); `style` is kept for nvtx_sum."""
    t = NVTX_T
    if not schema.has(t, "start", "eventType"):
        return
    text = '"text"' if schema.has(t, "text") else "NULL"
    text_id = _integer(schema, t, "textId", -1)
    gtid = _integer(schema, t, "globalTid", 0)
    end = '"end"' if schema.has(t, "end") else "NULL"
    types = ",".join(str(x) for x in NVTX_RANGES)
    ranges = f"eventType IN ({types}) AND {end} IS NOT NULL"
    ok = f"""typeof(start) IN ('integer', 'real') AND typeof({end}) IN ('integer', 'real') AND {end} >= start"""
    _count_bad_ranges(conn, schema, t, f"{ranges} AND NOT ({ok})", end)
    cursor = conn.execute(f'SELECT start, {end}, eventType, {gtid}, {text_id}, {text} FROM "{t}" '
                          f"WHERE {ranges} AND {ok}")
    while True:
        rows = cursor.fetchmany(chunk_rows)
        if not rows:
            return
        n = len(rows)
        schema.accounts.rows[t] += n
        start = np.fromiter((r[0] for r in rows), np.int64, n)
        block = {"start": start, "end": np.fromiter((r[1] for r in rows), np.int64, n),
                 "gtid": np.fromiter((r[3] for r in rows), np.int64, n)}
        code = np.fromiter((r[4] if r[4] >= 0 or r[5] is None else -2 - _intern(texts, r[5]) for r in rows),
                           np.int64, n)
        out = _host(block, n, USER_ANNOTATION, "user_annotation", code)
        out["style"] = np.fromiter((r[2] for r in rows), np.int16, n)
        yield out


def _integer(schema: Schema, table: str, column: str, default: int) -> str:
    """SQL for an integer column read as `default` where it is missing, NULL or not an integer."""
    if not schema.has(table, column):
        return str(default)
    return f"""CASE WHEN typeof("{column}") = 'integer' THEN "{column}" ELSE {default} END"""


def _count_bad_ranges(conn: sqlite3.Connection, schema: Schema, table: str, where: str, end: str) -> None:
    """NVTX ranges whose times are not numbers (or that end before they start): counted, not read."""
    why = (f"""CASE WHEN typeof(start) NOT IN ('integer', 'real') THEN 1 """
           f"""WHEN typeof({end}) NOT IN ('integer', 'real') THEN 2 ELSE 3 END""")
    for code, n in conn.execute(f'SELECT {why}, count(*) FROM "{table}" WHERE {where} GROUP BY 1'):
        schema.accounts.unusable(table, int(n), TIME_REASONS[int(code)])


def _intern(table: dict[str, int], text: str) -> int:
    i = table.get(text)
    if i is None:
        i = table[text] = len(table)
    return i
