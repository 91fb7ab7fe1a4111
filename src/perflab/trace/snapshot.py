"""Memory snapshots: the pickle `torch.cuda.memory._dump_snapshot` writes, or its JSON conversion.

A snapshot is data: plain dicts, lists, tuples, strings, numbers, booleans and None. The pickle is
read with a restricted unpickler whose `find_class` refuses every global, so a crafted pickle
(`os.system` in a reduce, say) is refused with one line and never runs. The JSON conversion
(`to_json` / `convert`) has the same structure (tuples become lists), keys in the order
allocator_settings, segments, device_traces so that `trace.sniff` recognizes it from its head;
it may be gzipped.

    snap = load("snapshot.pickle")           # or .json / .json.gz
    snap.segments[0].pool, snap.traces[0][-1].action
"""
from __future__ import annotations

import gzip
import io
import itertools
import json
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.errors import UnreadableInput
from perflab.trace.input_files import open_binary, refuse_special

DEFAULT_POOL = (0, 0)
# Bounds on what a snapshot file may unfold to (check_bounded): torch writes ~6 levels; a pickle's tree
# holds a few objects per byte (shared frame dicts included); measuring takes well under a second.
MAX_DEPTH = 64
NODES_PER_BYTE = 64
MIN_NODES = 1_000_000
MIN_SECONDS = 20.0
BYTES_PER_SECOND = 5e6  # measuring runs at ~30 MB/s of JSON here
# The block states the CUDA caching allocator reports.
ACTIVE_ALLOCATED, ACTIVE_PENDING_FREE, INACTIVE = "active_allocated", "active_pending_free", "inactive"


class RefusedPickle(UnreadableInput):
    """A pickle that asks to load a Python global: never a memory snapshot, never executed."""


class _DataOnlyUnpickler(pickle.Unpickler):
    """Builds containers and scalars only; any global (class, function) is refused."""

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle's hook
        raise RefusedPickle(f"refused to load {module}.{name}: a memory snapshot holds only plain data "
                            "(this pickle would run code; it was not executed)")

    def persistent_load(self, pid):
        raise RefusedPickle("refused a persistent id: a memory snapshot holds only plain data")


@dataclass
class Frame:
    filename: str
    line: int
    name: str

    def label(self) -> str:
        return f"{Path(self.filename).name}:{self.line} {self.name}"


@dataclass
class Block:
    address: int
    size: int
    requested_size: int
    state: str
    frames: list[Frame] = field(default_factory=list)

    @property
    def allocated(self) -> bool:
        return self.state == ACTIVE_ALLOCATED

    @property
    def active(self) -> bool:
        return self.state in (ACTIVE_ALLOCATED, ACTIVE_PENDING_FREE)


@dataclass
class Segment:
    device: int
    address: int
    total_size: int
    stream: int
    segment_type: str
    pool: tuple[int, int]
    is_expandable: bool
    blocks: list[Block]
    frames: list[Frame] = field(default_factory=list)

    @property
    def private(self) -> bool:
        """A private pool (CUDA graph capture, or a `torch.cuda.MemPool`): not the default pool."""
        return self.pool != DEFAULT_POOL

    @property
    def allocated(self) -> int:
        return sum(b.size for b in self.blocks if b.allocated)

    @property
    def active(self) -> int:
        return sum(b.size for b in self.blocks if b.active)

    @property
    def requested(self) -> int:
        return sum(b.requested_size for b in self.blocks if b.allocated)


@dataclass
class TraceEvent:
    """One entry of a device trace: alloc, free_requested, free_completed, segment_alloc, segment_free,
    segment_map, segment_unmap, snapshot, oom."""

    action: str
    addr: int
    size: int
    stream: int
    time_us: float | None
    frames: list[Frame] = field(default_factory=list)
    device_free: int | None = None            # oom: the bytes the device had free when the allocation failed


@dataclass
class Snapshot:
    segments: list[Segment]
    traces: list[list[TraceEvent]]            # one list per device (index = device)
    settings: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def devices(self) -> list[int]:
        found = {s.device for s in self.segments} | {i for i, t in enumerate(self.traces) if t}
        return sorted(found)


# ----------------------------------------------------------------------------------------- reading

def read_raw(path: str | Path) -> dict[str, Any]:
    """The snapshot as plain data (pickle through the restricted unpickler, or JSON), gzipped or not."""
    path = Path(path)
    refuse_special(path)
    try:
        with open_binary(path) as fh:
            data = fh.read()
    except (OSError, EOFError) as exc:
        raise UnreadableInput(f"{path}: cannot read it ({exc})") from None
    if not data:
        raise UnreadableInput(f"{path}: the file is empty")
    if data[:1] == b"\x80":
        raw = loads_pickle(data, path)
    else:
        try:
            raw = json.loads(data.decode("utf-8-sig"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise UnreadableInput(f"{path}: neither a snapshot pickle nor JSON ({type(exc).__name__}: "
                                  f"{str(exc)[:120]})") from None
    check_bounded(raw, len(data), path)
    if not isinstance(raw, dict) or "segments" not in raw:
        raise UnreadableInput(f"{path}: not a memory snapshot (no 'segments'; write one with "
                              "torch.cuda.memory._dump_snapshot)")
    return raw


def check_bounded(value: Any, size: int, path: str | Path = "<bytes>") -> None:
    """Refuse data whose tree (what JSON would write, and what every reader walks) is too deep, refers to
    itself, or is far larger than its file: a pickle's memo lets a few hundred bytes name the same list
    twice at every level, 2**60 lists once written out. Measured over the shared structure itself (each
    container once), so the refusal is quick however large the expansion would be."""
    budget = max(MIN_NODES, NODES_PER_BYTE * size)
    seconds = MIN_SECONDS + size / BYTES_PER_SECOND  # a large honest snapshot takes a while; a bomb is small
    deadline = time.monotonic() + seconds
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def refuse(why: str) -> UnreadableInput:
        return UnreadableInput(f"{path}: refused: {why}; a memory snapshot is a few levels of plain data "
                               "(nothing was built from this file)")

    def measure(obj: Any, depth: int) -> int:
        if not isinstance(obj, (dict, list, tuple)):
            return 1
        key = id(obj)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise refuse("the data refers to itself")
        if depth > MAX_DEPTH:
            raise refuse(f"nested deeper than {MAX_DEPTH} levels")
        if len(sizes) % 4096 == 0 and time.monotonic() > deadline:
            raise refuse(f"still not measured after {seconds:.0f} s")
        active.add(key)
        total = 1
        for child in itertools.chain.from_iterable(obj.items()) if isinstance(obj, dict) else obj:
            total += measure(child, depth + 1)
            if total > budget:
                raise refuse(f"its data would expand to more than {budget:,} objects from {size:,} bytes")
        active.discard(key)
        sizes[key] = total
        return total

    measure(value, 0)


def loads_pickle(data: bytes, path: str | Path = "<bytes>") -> Any:
    try:
        return _DataOnlyUnpickler(io.BytesIO(data)).load()
    except RefusedPickle as exc:
        raise RefusedPickle(f"{path}: {exc}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, RecursionError) as exc:
        raise UnreadableInput(f"{path}: not a readable snapshot pickle ({type(exc).__name__}: {exc})") from None


def load(path: str | Path) -> Snapshot:
    path = Path(path)
    raw = read_raw(path)
    try:
        snap = from_raw(raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UnreadableInput(f"{path}: malformed memory snapshot ({type(exc).__name__}: {exc})") from None
    snap.meta["path"] = str(path)
    return snap


def _frames(items: Any) -> list[Frame]:
    out = []
    for f in items or []:
        if isinstance(f, dict):
            out.append(Frame(str(f.get("filename", "?")), int(f.get("line", 0) or 0), str(f.get("name", "?"))))
    return out


def _pool(value: Any) -> tuple[int, int]:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    return DEFAULT_POOL


def from_raw(raw: dict[str, Any]) -> Snapshot:
    segments = []
    for s in raw.get("segments") or []:
        blocks = [Block(int(b.get("address", 0)), int(b["size"]), int(b.get("requested_size", b["size"])),
                        str(b.get("state", INACTIVE)), _frames(b.get("frames"))) for b in s.get("blocks") or []]
        segments.append(Segment(int(s.get("device", 0)), int(s.get("address", 0)), int(s["total_size"]),
                                int(s.get("stream", 0)), str(s.get("segment_type", "")),
                                _pool(s.get("segment_pool_id")), bool(s.get("is_expandable", False)), blocks,
                                _frames(s.get("frames"))))
    traces = []
    for dev in raw.get("device_traces") or []:
        events = []
        for e in dev or []:
            t = e.get("time_us")
            events.append(TraceEvent(str(e.get("action", "")), int(e.get("addr", 0) or 0), int(e.get("size", 0) or 0),
                                     int(e.get("stream", 0) or 0), float(t) if t is not None else None,
                                     _frames(e.get("frames")),
                                     int(e["device_free"]) if e.get("device_free") is not None else None))
        traces.append(events)
    settings = raw.get("allocator_settings") if isinstance(raw.get("allocator_settings"), dict) else {}
    return Snapshot(segments, traces, dict(settings))


# ------------------------------------------------------------------------------------- converting

def to_json(raw: dict[str, Any]) -> str:
    """The JSON conversion: same structure, keys ordered so the head names what it is."""
    ordered = {"allocator_settings": raw.get("allocator_settings") or {}, "segments": raw.get("segments") or [],
               "device_traces": raw.get("device_traces") or []}
    ordered.update({k: v for k, v in raw.items() if k not in ordered})
    return json.dumps(ordered, separators=(",", ":"))


def convert(src: str | Path, dest: str | Path, *, force: bool = False) -> Path:
    """Snapshot pickle (or JSON) -> JSON; gzipped when dest ends in .gz. Never over src; over another
    existing file only with force."""
    from perflab.outputs import check_output, write_output

    check_output(dest, force=force, inputs=[src])
    text = to_json(read_raw(src)).encode("utf-8")
    if Path(dest).name.endswith(".gz"):
        text = gzip.compress(text, compresslevel=9, mtime=0)
    return write_output(dest, text, force=force, inputs=[src])
