"""The arguments PyTorch records for collectives, read on demand from a Kineto trace file.

The columnar reader keeps only what every analysis needs; the sizes of collectives live in event
args it skips: on the NCCL kernel itself (torch >= 2.3: "Collective name", "In msg nelems",
"Out msg nelems", "Group size", "dtype", "Process Group Ranks"), on the host-side
`record_param_comms` op (same keys), or, in older traces, only as "Input Dims"/"Input type" of a
`nccl:<collective>` user annotation. The columnar reader hands every block to `block_records` as it
goes (trace/torch_profiler/kineto_events.py), so a loaded trace has them already; `read_comm_records` re-reads a file
for traces loaded another way.
"""
from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from typing import Any, Union

import msgspec

from perflab.trace.torch_profiler.json_stream import EventStream, LayoutError, NotATrace
from perflab.trace.sniff import open_binary

Num = Union[int, float, str]


class _Args(msgspec.Struct, gc=False):
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_nelems: Num | None = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Num | None = msgspec.field(name="Out msg nelems", default=None)
    group_size: Num | None = msgspec.field(name="Group size", default=None)
    dtype: str | None = None
    pg_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
    pg_name: Any = msgspec.field(name="Process Group Name", default=None)
    input_dims: Any = msgspec.field(name="Input Dims", default=None)
    input_type: Any = msgspec.field(name="Input type", default=None)
    correlation: Num | None = None


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: Num | None = None
    dur: Num | None = None
    args: _Args | None = None


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Event] = []


@dataclass
class CommRecord:
    """One event that describes a collective: an NCCL kernel with args, record_param_comms, or nccl:* range."""

    source: str                 # kernel | record_param_comms | annotation
    ts: float
    end: float
    correlation: int            # kernels only, else -1
    collective: str | None      # as recorded ("allreduce", "all_reduce", "_allgather_base", ...)
    in_nelems: int | None
    out_nelems: int | None
    group_size: int | None
    dtype: str | None
    pg: str | None              # process group ranks or name


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _int(v: Any) -> int | None:
    f = _num(v)
    return int(f) if f is not None else None


def _annotation_size(dims: Any, types: Any) -> tuple[int | None, str | None]:
    """nccl:<collective> ranges of older traces: the first input's shape and type."""
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and all(isinstance(d, int) for d in dims[0]):
        n = math.prod(dims[0]) if dims[0] else 1
        t = types[0] if isinstance(types, list) and types and isinstance(types[0], str) else None
        return n, t
    return None, None


def _record(e: _Event) -> CommRecord | None:
    a = e.args
    name = e.name
    if a is None or (a.collective is None and not name.startswith("nccl:")):  # most events: reject cheaply
        return None
    ts, dur = _num(e.ts), _num(e.dur)
    if ts is None or dur is None or e.ph not in ("X", ""):
        return None
    if a.collective is not None and (may_carry_args(e.cat) or name == "record_param_comms"):
        source = "kernel" if may_carry_args(e.cat) else "record_param_comms"
        pg = a.pg_ranks if isinstance(a.pg_ranks, str) else (json.dumps(a.pg_ranks) if a.pg_ranks else None)
        return CommRecord(source, ts, ts + dur, _int(a.correlation) if source == "kernel" else -1, a.collective,
                          _int(a.in_nelems), _int(a.out_nelems), _int(a.group_size), a.dtype,
                          pg or (str(a.pg_name) if a.pg_name is not None else None))
    if name.startswith("nccl:") and may_annotate(e.cat):
        n, t = _annotation_size(a.input_dims, a.input_type)
        return CommRecord("annotation", ts, ts + dur, -1, name[5:], n, None, None, t, None)
    return None


_block_decoder = msgspec.json.Decoder(list[_Event])
_MARKERS = (b"Collective name", b"nccl:")


def _any(raw: msgspec.Raw) -> Any:
    return msgspec.json.decode(raw) if len(raw) else None


def may_carry_args(cat: str) -> bool:
    """Whether an event of this category with a "Collective name" arg is a record (a kernel; else only
    `record_param_comms` by name)."""
    return cat.lower() == "kernel"


def may_annotate(cat: str) -> bool:
    """Whether an event of this category named nccl:* is a record (an older trace's collective range)."""
    return cat in ("user_annotation", "cpu_op")


def struct_records(events: list) -> list[CommRecord]:
    """The records among events decoded by the columnar reader (kineto_structs.CommEvent): what `block_records`
    finds in the same block, without decoding it again. (An event without a correlation id gives -1, not None.)"""
    out = []
    for e in events:
        a = e.args
        if a.collective is None and not e.name.startswith("nccl:"):
            continue
        args = None if a.absent else _Args(
            collective=a.collective, in_nelems=a.in_nelems, out_nelems=a.out_nelems, group_size=a.group_size,
            dtype=a.dtype, pg_ranks=a.pg_ranks, pg_name=a.pg_name, input_dims=_any(a.input_dims),
            input_type=_any(a.input_type), correlation=a.correlation)
        record = _record(_Event(ph=e.ph, cat=e.cat, name=e.name, ts=e.ts, dur=e.dur, args=args))
        if record is not None:
            out.append(record)
    return out


def block_records(raw: bytes | memoryview) -> list[CommRecord]:
    data = bytes(raw)  # `in` on bytes is the fastest search here (faster than a regex over the memoryview)
    if not any(m in data for m in _MARKERS):  # most blocks of a large trace: skip the decode
        return []
    try:
        events = _block_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        events = _loose_events(b'{"traceEvents":' + data + b"}")
    return [r for r in map(_record, events) if r is not None]


def read_comm_records(path: str) -> list[CommRecord]:
    """All events of the file that describe a collective (empty list when the file cannot be read again).

    Streams the file in blocks like the main reader, decoding only blocks that mention a collective,
    so a multi-GB trace costs one pass of reading, not a second full decode."""
    try:
        out: list[CommRecord] = []
        with open_binary(path) as fh:
            for records in EventStream(fh, 1 << 20).blocks(block_records):
                out.extend(records)
        return out
    except (LayoutError, NotATrace):
        pass  # an unusual layout: decode the whole document below
    except (OSError, EOFError, zlib.error):
        return []
    try:
        with open_binary(path) as fh:
            data = fh.read()
    except (OSError, EOFError, zlib.error):
        return []
    try:
        events = msgspec.json.decode(data, type=_Doc).traceEvents
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        events = _loose_events(data)
    return [r for r in map(_record, events) if r is not None]


def _loose_events(data: bytes) -> list[_Event]:
    """Documents with odd types: decode loosely and keep the events that convert."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return []
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    out = []
    for raw in events if isinstance(events, list) else []:
        if not isinstance(raw, dict) or not isinstance(raw.get("args"), dict):
            continue
        try:
            out.append(msgspec.convert(raw, _Event, strict=False))
        except (msgspec.ValidationError, TypeError):
            continue
    return out
