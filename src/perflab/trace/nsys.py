"""Read an Nsight Systems SQLite export (`nsys export --type sqlite`) into the trace model.

    from perflab.trace import nsys
    trace = nsys.load("report.sqlite")          # every process in one Trace
    ranks = nsys.load_ranks("report.sqlite")    # one Trace per process with GPU work (the doctor's view)

Kernels, copies and memsets (GPU rows, tid = stream as Kineto has it), CUDA runtime and driver calls
(one row per call: duplicates under one correlation id are dropped), CUDA synchronization records,
NVTX ranges (annotations, operators, steps: see nsys_names), and OS runtime calls (cat os_runtime:
blocking calls outside any CUDA call are host work, CPU ops; those inside a CUDA call are that call's
own waiting and kept as OTHER). Tables are read in chunks into numpy (nsys_db), so memory follows
the rows kept. `meta["capture"]` holds what nsys said about its capture (nsys_capture).
"""
from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np

from perflab.errors import UnreadableInput
from perflab.trace.nsight_systems import nsys_capture as cap
from perflab.trace.nsight_systems import nsys_checks as checks
from perflab.trace.nsight_systems import nsys_tables as tables
from perflab.trace.model import CPU_OP, GPU_WORK_KINDS, OTHER, RUNTIME, Trace
from perflab.trace.nsight_systems.nsys_db import CHUNK_ROWS, Schema, connect
from perflab.trace.nsight_systems.nsys_names import AUTO, NameTable, mark_steps, resolve

# the model's columns: dtype and the value of a row that has none. tid, stream and device are int32 here (OS
# thread ids and CUDA stream/device ids fit), which the analyses read like Kineto's int64
COLUMNS = {"cat": (np.int16, -1), "kind": (np.int8, -1), "name": (np.int32, -1), "ts": (np.float64, np.nan),
           "dur": (np.float64, np.nan), "tid": (np.int32, -1), "stream": (np.int32, -1), "device": (np.int32, -1),
           "correlation": (np.int64, -1), "external_id": (np.int64, -1), "nbytes": (np.float64, np.nan),
           "grid": (np.int64, -1), "block": (np.int64, -1), "shape": (np.int32, -1), "dtype": (np.int32, -1)}
# extra columns (Trace.extra): name -> (dtype, value where a table has none)
EXTRA = {"pid": (np.int32, -1), "context": (np.int32, -1), "graph_id": (np.int64, -1), "graph_node": (np.int64, -1),
         "registers": (np.int16, -1), "shared_mem": (np.int32, -1), "nvtx_style": (np.int16, -1)}
_LAUNCH = ("Launch", "Memcpy", "Memset", "GraphLaunch")


def is_export(path: str | Path) -> bool:
    """True for an SQLite file with Nsight Systems' tables."""
    from perflab.trace.nsight_systems.nsys_db import is_sqlite

    path = Path(path)
    if not path.is_file() or not is_sqlite(path):
        return False
    try:
        conn = connect(path)
    except UnreadableInput:
        return False
    try:
        return Schema.read(conn).is_nsys
    except sqlite3.DatabaseError as exc:
        raise damaged(path, exc) from None
    finally:
        conn.close()


def damaged(path: Path, exc: Exception) -> UnreadableInput:
    return UnreadableInput(f"{path}: the SQLite file is damaged ({exc}); export the report again "
                           "(nsys export --type sqlite) or copy it again")


def load(path: str | Path, *, nvtx_steps: str | None = AUTO, chunk_rows: int = CHUNK_ROWS) -> Trace:
    """All processes of the export as one Trace (see the module docstring). Raises UnreadableInput, for a damaged
    file too (a page SQLite cannot read, wherever it lies)."""
    try:
        return _load(Path(path), nvtx_steps=nvtx_steps, chunk_rows=chunk_rows)
    except sqlite3.DatabaseError as exc:
        raise damaged(Path(path), exc) from None


def _load(path: Path, *, nvtx_steps: str | None, chunk_rows: int) -> Trace:
    conn = connect(path)
    try:
        schema = Schema.read(conn, path)
        if not schema.is_nsys:
            raise UnreadableInput(f"{path}: an SQLite file, but not an Nsight Systems export (no StringIds and "
                                  "CUPTI/NVTX tables); give the output of `nsys export --type sqlite`")
        capture = _capture(conn, schema)
        parts, texts, dropped = _read_parts(conn, schema, chunk_rows)
        unusable = schema.accounts.summary()
        refused = checks.refusal(unusable, sum(schema.accounts.rows.values()))
        if refused:
            raise UnreadableInput(f"{path}: {refused}")
        capture["unusable"] = unusable
        names = NameTable()
        resolve(conn, schema, parts, texts, names)
        capture["duplicate_api_rows"] = dropped
        capture["api_calls"], capture["launch_calls"] = _api_counts(parts, names)
        meta_threads = cap.thread_names(conn, schema)
        meta_procs = cap.processes(conn, schema)
    finally:
        conn.close()
    columns, extra = _assemble(parts)
    steps = mark_steps(columns["name"], columns["kind"], columns["ts"], names, nvtx_steps)
    trace = Trace(names=names.table, cats=list(tables.CATEGORIES), extra=extra, meta={}, **columns)
    gpu = np.isin(trace.kind, GPU_WORK_KINDS)
    if not gpu.any():
        capture["no_gpu_work"] = cap.why_no_gpu_work(capture, Counter(capture["api_calls"]), capture["launch_calls"])
    trace.meta.update(
        path=str(path), source="nsys", schema_version=capture["export"].get("schema_version"),
        nsys_version=capture["export"].get("nsys_version"), rank=0, world_size=1, capture=capture,
        device_properties=capture["devices"], nvtx_steps=steps, thread_names_nsys=meta_threads,
        processes=meta_procs, host_ops_from_runtime=not _has_operators(trace), framework=_framework(trace),
        n_events=len(trace), dropped_events=sum(i["dropped"] for i in unusable.values()),
    )
    trace.meta["device_name"] = device_name(trace)
    trace.cache["comm_records"] = []  # no Kineto collective args in an export: never re-read the file as JSON
    return trace


def _has_operators(trace: Trace) -> bool:
    """PyTorch operator ranges (emit_nvtx) recorded: then, as in Kineto, they hold the host's CUDA calls."""
    return bool(((trace.kind == CPU_OP) & (trace.cat != tables.CAT["os_runtime"])).any())


def _framework(trace: Trace) -> str | None:
    """"pytorch" when PyTorch ran (its kernels or operator ranges), else None: a CUDA program of its own."""
    marks = ("at::native::", "c10::", "aten::", "at_cuda_detail::")
    return "pytorch" if any(any(m in n for m in marks) for n in trace.names) else None


def _capture(conn, schema: Schema) -> dict:
    present = {k: t in schema.columns for k, t in (
        ("kernel", tables.KERNEL_T), ("memcpy", tables.MEMCPY_T), ("memset", tables.MEMSET_T),
        ("runtime", tables.RUNTIME_T), ("sync", tables.SYNC_T), ("nvtx", tables.NVTX_T), ("osrt", tables.OSRT_T),
        ("graph_trace", tables.GRAPH_T))}
    return {"export": cap.export_info(conn, schema), "settings": cap.capture_settings(conn, schema),
            "diagnostics": cap.diagnostics(conn, schema), "devices": cap.devices(conn, schema), "tables": present}


def _read_parts(conn, schema: Schema, chunk_rows: int) -> tuple[dict[str, list[dict]], dict[str, int], int]:
    parts: dict[str, list[dict]] = {}
    for source, reader in (("kernel", tables.kernels), ("graph", tables.graphs), ("memcpy", tables.memcpys),
                           ("memset", tables.memsets), ("sync", tables.syncs)):
        parts[source] = list(reader(conn, schema, chunk_rows))
    api = list(tables.api_calls(conn, schema, chunk_rows))
    dropped = 0
    if api:
        merged, dropped = tables.dedupe_api(_concat(api))
        parts["api"] = [merged]
    osrt = list(tables.os_calls(conn, schema, chunk_rows))
    if osrt:
        parts["osrt"] = [_nest_os_calls(_concat(osrt), parts.get("api", []))]
    texts: dict[str, int] = {}
    parts["nvtx"] = list(tables.nvtx_ranges(conn, schema, texts, chunk_rows))
    for p in parts["nvtx"]:
        p["x_nvtx_style"] = p.pop("style")
    return {k: v for k, v in parts.items() if v}, texts, dropped


def _concat(chunk_list: list[dict]) -> dict:
    keys = chunk_list[0].keys()
    return {k: np.concatenate([c[k] for c in chunk_list]) for k in keys}


def _nest_os_calls(osrt: dict, api_parts: list[dict]) -> dict:
    """OS calls made inside a CUDA call on the same thread (a synchronize polling, an allocation's ioctl)
    are that call's own time: kind OTHER, so the host analysis reads the CUDA call, not the syscall."""
    if not api_parts:
        return osrt
    api = api_parts[0]
    key_api = (api["x_pid"].astype(np.int64) << 32) | api["tid"]
    key_os = (osrt["x_pid"].astype(np.int64) << 32) | osrt["tid"]
    nested = np.zeros(key_os.size, dtype=bool)
    for key in np.unique(key_os).tolist():
        mine = np.flatnonzero(key_api == key)
        on = np.flatnonzero(key_os == key)
        if mine.size == 0:
            continue
        order = mine[np.argsort(api["ts"][mine], kind="stable")]
        starts = api["ts"][order]
        reach = np.maximum.accumulate(api["ts"][order] + api["dur"][order])
        i = np.searchsorted(starts, osrt["ts"][on], side="right") - 1
        ok = i >= 0
        nested[on[ok]] = reach[i[ok]] >= osrt["ts"][on[ok]] + osrt["dur"][on[ok]]
    osrt["kind"] = np.where(nested, OTHER, osrt["kind"]).astype(np.int8)
    return osrt


def _api_counts(parts: dict[str, list[dict]], names: NameTable) -> tuple[dict[str, int], int]:
    """Calls per API name, and how many calls launch GPU work (kernel launches, copies, memsets)."""
    calls: Counter = Counter()
    for p in parts.get("api", []):
        ids, n = np.unique(p["name"], return_counts=True)
        for i, c in zip(ids.tolist(), n.tolist()):
            calls[names.table[i]] += c
    launches = sum(c for n, c in calls.items() if any(w in n for w in _LAUNCH))
    return dict(calls), launches


def _assemble(parts: dict[str, list[dict]]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One array per column, every table's rows sorted by start time; the chunks are freed as they go."""
    chunk_list = [c for source in parts.values() for c in source]
    parts.clear()
    order = None
    if chunk_list:
        ts = np.concatenate([c["ts"] for c in chunk_list])
        order = np.argsort(ts, kind="stable")
        del ts
    sizes = [c["ts"].size for c in chunk_list]
    columns: dict[str, np.ndarray] = {}
    extra: dict[str, np.ndarray] = {}
    for key, (dtype, fill) in COLUMNS.items():
        columns[key] = _column(chunk_list, sizes, key, dtype, fill, order)
    for key, (dtype, fill) in EXTRA.items():  # an extra column only where some row has a value: memory
        if any(f"x_{key}" in c for c in chunk_list):
            extra[key] = _column(chunk_list, sizes, f"x_{key}", dtype, fill, order)
    return columns, extra


def _column(chunk_list: list[dict], sizes: list[int], key: str, dtype, fill, order: np.ndarray | None) -> np.ndarray:
    """One column over every chunk, in start-time order. A column no chunk holds is the fill value for every
    row: a read-only broadcast that takes no memory (external_id, shape and dtype of any export)."""
    total = sum(sizes)
    if not any(key in c for c in chunk_list):
        return np.broadcast_to(np.array(fill, dtype=dtype), (total,))
    pieces = [c.pop(key).astype(dtype, copy=False) if key in c else np.full(n, fill, dtype=dtype)
              for c, n in zip(chunk_list, sizes)]
    out = np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)
    del pieces
    return out[order] if order is not None else out


def device_name(trace: Trace) -> str:
    """The GPU that ran most of the GPU time."""
    gpu = np.flatnonzero(np.isin(trace.kind, GPU_WORK_KINDS))
    props = trace.meta.get("device_properties") or []
    if gpu.size == 0:
        return props[0]["name"] if props else "no GPU activity recorded"
    dev = trace.device[gpu]
    ok = dev >= 0
    main = int(np.bincount(dev[ok], weights=trace.dur[gpu][ok]).argmax()) if ok.any() else 0
    named = {p["id"]: p["name"] for p in props}
    return named.get(main) or (props[0]["name"] if props else "unknown GPU")


def processes_with_gpu_work(trace: Trace) -> list[int]:
    """pids that launched GPU work or made CUDA calls, most GPU time first."""
    pid = trace.extra.get("pid")
    if pid is None or len(trace) == 0:
        return []
    gpu = np.isin(trace.kind, GPU_WORK_KINDS)
    pids = np.unique(pid[gpu | (trace.kind == RUNTIME)])
    weight = {int(p): float(trace.dur[gpu & (pid == p)].sum()) for p in pids.tolist()}
    return sorted(weight, key=lambda p: (-weight[p], p))


def split_processes(trace: Trace) -> list[Trace]:
    """One Trace per process with GPU work (rank = its place by GPU time; a single process is returned as is)."""
    gpu_pids = [p for p in processes_with_gpu_work(trace) if (np.isin(trace.kind, GPU_WORK_KINDS) & (trace.extra["pid"] == p)).any()]
    if len(gpu_pids) <= 1:
        if gpu_pids:
            trace.meta["pid"] = gpu_pids[0]
        return [trace]
    out = []
    for rank, p in enumerate(gpu_pids):
        keep = trace.extra["pid"] == p
        sub = Trace(names=trace.names, cats=trace.cats, shapes=trace.shapes, dtypes=trace.dtypes,
                    extra={k: v[keep] for k, v in trace.extra.items()},
                    meta={**trace.meta, "rank": rank, "world_size": len(gpu_pids), "pid": p},
                    **{k: _subset(getattr(trace, k), keep) for k in COLUMNS})
        sub.meta["device_name"] = device_name(sub)
        sub.cache["comm_records"] = []
        out.append(sub)
    return out


def _subset(column: np.ndarray, keep: np.ndarray) -> np.ndarray:
    if column.strides == (0,):  # a broadcast default stays one
        return np.broadcast_to(column[:1], (int(keep.sum()),))
    return column[keep]


def load_ranks(path: str | Path, *, nvtx_steps: str | None = AUTO) -> list[Trace]:
    """One Trace per process that ran GPU work, as the doctor reads several ranks."""
    return split_processes(load(path, nvtx_steps=nvtx_steps))
