"""Read PyTorch profiler (Kineto) traces: a .json / .json.gz file, or a folder of per-rank traces."""
from __future__ import annotations

import contextlib
import gc
import json
import math
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from perflab.errors import UnreadableInput
from perflab.trace import plausible
from perflab.trace.heap import give_back_free_memory
from perflab.trace.read_limits import json_depth
from perflab.trace.torch_profiler.json_stream import EventStream, LayoutError, NotATrace
from perflab.trace.torch_profiler.kineto_events import ColumnBuilder
from perflab.trace.torch_profiler import kineto_native
from perflab.trace.torch_profiler.kineto_parallel import BadCut, decode_parallel, json_size, worker_count
from perflab.trace.torch_profiler.kineto_threads import decode_threaded
from perflab.trace.model import GPU_WORK_KINDS, PROGRAM_KEY, STEP_RE, USER_ANNOTATION, Trace, bounded_names
from perflab.trace.input_files import open_binary, refuse_special

BLOCK_SIZE = 1 << 20  # small blocks keep the decoded events in cache while they become columns
NATIVE_BLOCK_SIZE = 4 << 20  # the C scanner keeps no objects; larger blocks cost fewer numpy calls per event
# Below this size an unusual document (NaN literals, odd layout) is re-read whole by the stdlib.
_WHOLE_DOCUMENT_LIMIT = 256 << 20


def load(path: str | Path, *, block_size: int = BLOCK_SIZE) -> Trace:
    """Load one Kineto trace file. Raises UnreadableInput with a one-line reason."""
    path = Path(path)
    if path.is_dir():
        raise UnreadableInput(f"{path} is a folder: use load_ranks() for a folder of per-rank traces")
    if not path.exists():
        raise UnreadableInput(f"{path}: no such file")
    refuse_special(path)
    try:
        with json_depth(path):
            builder, meta_doc = _read(path, block_size)
    except NotATrace:
        raise UnreadableInput(f"{path}: not a Kineto trace (no top-level traceEvents array); "
                              "give a PyTorch profiler trace (.json or .json.gz)") from None
    except LayoutError as exc:
        with json_depth(path):
            builder, meta_doc = _load_whole_document(path, exc)
    except (OSError, EOFError, zlib.error) as exc:
        raise UnreadableInput(f"{path}: cannot read it ({exc}); is the file complete?") from None
    trace = _assemble(builder, meta_doc, path)
    del builder
    give_back_free_memory()
    return trace


def _read(path: Path, block_size: int) -> tuple[ColumnBuilder, dict[str, Any]]:
    native = kineto_native.available()
    if native and block_size == BLOCK_SIZE:
        block_size = NATIVE_BLOCK_SIZE
    # With the C scanner: threads, counted by the JSON's size (a .gz's decompressing runs beside the decoding).
    # Without it: worker processes, by the size on disk: counting a .gz by its decompressed size put both cores on
    # it, which measured slower (+23 % wall) and 9 % more memory on a 146 MB trace on this 2-core machine (perf
    # branch, 2026-11-27).
    workers = worker_count(json_size(path) if native else path.stat().st_size)
    if workers > 1:
        try:
            with _no_gc():
                builder, meta = (decode_threaded if native else decode_parallel)(path, block_size, workers)
            return builder, _decode_metadata(meta)
        except (BadCut, LayoutError, NotATrace):
            pass  # an unusual document: the sequential reader retries cuts and explains errors
    return _read_sequential(path, block_size)


def _read_sequential(path: Path, block_size: int) -> tuple[ColumnBuilder, dict[str, Any]]:
    builder = ColumnBuilder()
    with open_binary(path) as fh, _no_gc():
        stream = EventStream(fh, block_size)
        for _ in stream.blocks(builder.add_raw):
            pass
        return builder, _decode_metadata(stream.metadata_document())


@contextlib.contextmanager
def _no_gc():
    """Bulk decoding allocates millions of acyclic objects; cycle collection only slows it down."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_ranks(path: str | Path, *, block_size: int = BLOCK_SIZE) -> list[Trace]:
    """One trace per rank of one job (rank from distributedInfo.rank), sorted by rank; a folder holding the
    traces of several jobs is refused with the list (trace/torch_profiler/kineto_folder.py)."""
    path = Path(path)
    if not path.is_dir():
        return [load(path, block_size=block_size)]
    return load_folder(path, block_size=block_size).traces


def load_folder(path: str | Path, *, block_size: int = BLOCK_SIZE):
    """The ranks of the job in a folder and what became of every file in it (kineto_folder.Folder)."""
    from perflab.trace.torch_profiler.kineto_folder import load_folder as read_folder

    return read_folder(path, lambda f: load(f, block_size=block_size))


def _decode_metadata(doc: bytes) -> dict[str, Any]:
    try:
        meta = msgspec.json.decode(doc)
    except (msgspec.DecodeError, UnicodeDecodeError):
        try:
            meta = json.loads(doc)
        except (ValueError, RecursionError):
            return {}
    return meta if isinstance(meta, dict) else {}


def _load_whole_document(path: Path, cause: LayoutError) -> tuple[ColumnBuilder, dict]:
    """Fallback for documents the streaming cutter cannot handle: the stdlib also reads NaN/Infinity."""
    try:
        with open_binary(path) as fh:
            data = fh.read(_WHOLE_DOCUMENT_LIMIT + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise UnreadableInput(f"{path}: cannot read it ({exc}); is the file complete?") from None
    if len(data) > _WHOLE_DOCUMENT_LIMIT:
        raise UnreadableInput(f"{path}: invalid trace JSON near byte {cause.offset}: {cause}") from None
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise UnreadableInput(f"{path}: invalid JSON ({_short(exc)}); is the file complete?") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UnreadableInput(f"{path}: not a Kineto trace (no top-level traceEvents array)")
    builder = ColumnBuilder()
    builder.add_dicts(doc.pop("traceEvents"))
    return builder, doc


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:160]


def _assemble(builder: ColumnBuilder, meta_doc: dict[str, Any], path: Path) -> Trace:
    columns, flows = builder.finish()
    names, full_names = bounded_names(builder.names.table())
    steps = np.fromiter((bool(STEP_RE.search(n)) for n in names), bool)  # any era's category
    annotation = (columns["kind"] == USER_ANNOTATION) | (steps[columns["name"]] if steps.size else False)
    valid, reasons = plausible.screen(columns["ts"], columns["dur"], annotation)
    implausible = plausible.summary(int(np.count_nonzero(valid)), reasons)
    dropped = implausible["dropped"]
    first_row_kept = bool(builder.first_event_is_complete) and valid.size > 0 and bool(valid[0])
    if dropped:
        columns = {k: v[valid] for k, v in columns.items()}
    refused = plausible.refusal(implausible)
    if refused:
        raise UnreadableInput(f"{path}: {refused}")
    if columns["ts"].size == 0:
        what = "no events" if builder.n_events == 0 else "no complete events with a time and duration"
        raise UnreadableInput(f"{path}: the trace has {what} (empty trace)")
    meta = _metadata(meta_doc, path)
    meta.update(
        ts_is_float=builder.ts_is_float,
        first_event_row=0 if first_row_kept else None,
        dropped_events=dropped,
        implausible=implausible,
        n_events=builder.n_events,
        thread_names={-2 - i: name for i, name in enumerate(builder.thread_names.table())},
        long_names=len(full_names),
    )
    trace = Trace(
        names=names, full_names=full_names, cats=builder.cats.table(), shapes=builder.shapes.text_table(),
        dtypes=builder.dtypes.text_table(), concretes=builder.concretes.text_table(), flows=flows, meta=meta, **columns,
    )
    trace.meta["device_name"] = _device_name(trace)
    if builder.comm is not None:
        trace.cache["comm_records"] = builder.comm  # file order, as read_comm_records gives them
    return trace


def _metadata(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    dist = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    props = doc.get("deviceProperties") if isinstance(doc.get("deviceProperties"), list) else []
    return {
        "path": str(path),
        "schema_version": doc.get("schemaVersion"),
        "rank": _int_or(dist.get("rank"), 0),
        "world_size": _int_or(dist.get("world_size"), 1),
        "backend": dist.get("backend"),
        "pg_count": dist.get("pg_count"), "nccl_version": dist.get("nccl_version"),  # same for all ranks of a job
        "device_properties": [p for p in props if isinstance(p, dict)],
        "base_time_ns": doc.get("baseTimeNanoseconds"),
        "trace_name": doc.get("traceName"),
        "cuda_driver_version": doc.get("cuda_driver_version") if isinstance(doc.get("cuda_driver_version"), int) else None,
        "program": _program(doc.get(PROGRAM_KEY)),
    }


def _program(value: Any) -> list[str] | None:
    """The command perflab recorded the trace of (a list of strings), None when absent or malformed."""
    if isinstance(value, str):   # written as JSON text by a profiler that did not parse it
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        return value
    return None


def _int_or(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return default


def _device_name(trace: Trace) -> str:
    gpu = np.isin(trace.kind, GPU_WORK_KINDS)
    if not gpu.any():
        return "CPU only (no GPU events)"
    devices = trace.device[gpu]
    devices = devices[devices >= 0]
    main = int(np.bincount(devices).argmax()) if devices.size else 0
    props = trace.meta.get("device_properties") or []
    for p in props:
        if _int_or(p.get("id"), -1) == main and p.get("name"):
            return str(p["name"])
    named = [str(p["name"]) for p in props if p.get("name")]
    return named[0] if named else "unknown GPU"
