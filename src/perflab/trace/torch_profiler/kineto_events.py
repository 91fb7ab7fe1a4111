"""Decode blocks of Kineto events into columns.

msgspec decodes each block into small typed structs that keep only the fields the analyses need
(unknown keys are skipped without building Python objects); the structs are turned into numpy
columns at once and dropped, so memory stays bounded by the block size. Events that do not match
the expected types (a string where a number belongs, null, ...) go through a tolerant path that
coerces field by field.
"""
from __future__ import annotations

import math
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from itertools import compress, count, repeat
from operator import attrgetter, is_not
from typing import Any

import msgspec
import numpy as np

from perflab.trace.torch_profiler.comm_args import block_records, may_annotate, may_carry_args, struct_records
from perflab.trace.torch_profiler import kineto_native
from perflab.trace.torch_profiler.kineto_loose import loose_event
from perflab.trace.torch_profiler.kineto_structs import NAN, Args, CommEvent, Event, _to_int
from perflab.trace.model import CPU_OP, KERNEL, MEMCPY, MEMSET, PYTHON, USER_ANNOTATION, kind_of_category

block_decoder = msgspec.json.Decoder(list[Event])
_comm_block_decoder = msgspec.json.Decoder(list[CommEvent])  # the columns and the collectives' args, one pass
_loose_decoder = msgspec.json.Decoder(list[Any])

_JOIN_IN_THREADS = 1 << 20   # events: below this, joining the blocks' columns is too quick to share out
_PH_CODE = defaultdict(lambda: 9, {"X": 0, "s": 1, "f": 2, "t": 3})


class _Interner(dict):
    """str -> dense int id, assigned in order of first appearance."""

    def __init__(self) -> None:
        super().__init__()
        self._next = count().__next__
        self.order: list = []   # the keys by id (new ones are read from here without walking the dict)

    def __missing__(self, key):
        value = self[key] = self._next()
        self.order.append(key)
        return value

    def table(self) -> list:
        return list(self.keys())

    def text_table(self) -> list[str]:
        return [k.decode("utf-8", "replace") if isinstance(k, bytes) else k for k in self.keys()]


def _to_float(v: Any) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return NAN
    return NAN


def _coerced(values: list, dtype, convert) -> np.ndarray:
    native = int if np.issubdtype(dtype, np.integer) else float
    fixed = [v if type(v) is native else convert(v) for v in values]
    return np.fromiter(fixed, dtype=dtype, count=len(values))


def _field(events: list, name: str, dtype, convert) -> np.ndarray:
    """One attribute of every event as a column (one pass; a second, coercing pass only if needed)."""
    getter = attrgetter(name)
    try:
        return np.fromiter(map(getter, events), dtype=dtype, count=len(events))
    except (TypeError, ValueError, OverflowError):
        return _coerced(list(map(getter, events)), dtype, convert)


def _dims_product(dims: list[int] | None) -> int:
    if not dims:
        return -1
    out = math.prod(dims)
    return out if 0 <= out < (1 << 62) else -1


class ColumnBuilder:
    """Accumulates decoded blocks; `finish()` returns the columns and string tables."""

    def __init__(self) -> None:
        self.names = _Interner()
        self.cats = _Interner()
        self.shapes = _Interner()
        self.dtypes = _Interner()
        self.concretes = _Interner()
        self.thread_names = _Interner()
        self.parts: dict[str, list[np.ndarray]] = defaultdict(list)
        self.flow_parts: dict[str, list[np.ndarray]] = defaultdict(list)
        self.ts_is_float = False  # HTA rounds all times when any ts is fractional or missing
        self.first_event_is_complete: bool | None = None
        self.n_events = 0
        self._kind_of_cat: list[int] = []
        self._comm_cat: list[int] = []    # per category and name: what a collective's record needs (_candidates)
        self._comm_name: list[int] = []
        # the args of collectives (trace/torch_profiler/comm_args.py), gathered from the same blocks; None when
        # events came another way (add_dicts) and collectives must re-read the file for them
        self.comm: list | None = []
        self._native = kineto_native.NativeBlocks(self) if kineto_native.available() else None

    # -- thread ids may be strings in Chrome traces ("PyTorch Profiler"): give those negative ids
    def _thread(self, v: Any) -> int:
        if isinstance(v, str):
            try:
                return int(v)
            except ValueError:
                return -2 - self.thread_names[v]
        return _to_int(v)

    def add_raw(self, raw: bytes | memoryview) -> None:
        """Decode one JSON array of events and add it."""
        if self._native is not None and self._native.add(raw):
            return
        if self.comm is not None:
            try:
                events = _comm_block_decoder.decode(raw)
            except msgspec.ValidationError:
                pass  # a field of an unexpected type: each reader's own path below
            else:
                self.add(events, comm=True)
                return
        try:
            events = block_decoder.decode(raw)
        except msgspec.ValidationError:  # a field of an unexpected type: coerce event by event
            events = [loose_event(e) for e in _loose_decoder.decode(raw)]
        self.add(events)
        if self.comm is not None:
            self.comm.extend(block_records(raw))

    def _kinds(self, cat_ids: np.ndarray) -> np.ndarray:
        while len(self._kind_of_cat) < len(self.cats):
            self._kind_of_cat.append(kind_of_category(self.cats.table()[len(self._kind_of_cat)]))
        return np.asarray(self._kind_of_cat, dtype=np.int8)[cat_ids]

    def add_dicts(self, items: list) -> None:
        self.comm = None
        self.add([loose_event(e) for e in items])

    def add(self, events: list[Event], comm: bool = False) -> None:
        """Add decoded events; comm: they are kineto_structs.CommEvent, and the collectives' records among them
        are gathered too."""
        n = len(events)
        if n == 0:
            return
        if self.first_event_is_complete is None:
            self.first_event_is_complete = events[0].ph == "X"
        self.n_events += n
        phase = np.fromiter(map(_PH_CODE.__getitem__, map(attrgetter("ph"), events)), np.int8, n)
        complete = phase == 0
        candidates = self._add_complete(list(compress(events, complete.tolist())), comm)
        if comm:
            unnamed = [i for i in np.flatnonzero(phase == 9).tolist() if events[i].ph == ""]  # X or "" can be one
            rows = sorted(np.flatnonzero(complete)[candidates].tolist() + unnamed)
            self.comm.extend(struct_records([events[i] for i in rows]))
        flows = list(compress(events, ((phase == 1) | (phase == 2) | (phase == 3)).tolist()))
        if flows:
            self._add_flows(flows)

    def _note_ts(self, ts: np.ndarray) -> None:
        if not self.ts_is_float:  # fractional (or missing) timestamps: HTA then rounds every event
            with np.errstate(invalid="ignore"):  # inf % 1 is NaN, which counts as not whole anyway
                self.ts_is_float = bool((ts % 1 != 0).any() | np.isnan(ts).any())

    def _add_complete(self, ev: list[Event], comm: bool = False) -> np.ndarray:
        """Columns of the complete events; with comm, which of them may be a collective's record."""
        n = len(ev)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        p = self.parts
        cat_ids = np.fromiter(map(self.cats.__getitem__, map(attrgetter("cat"), ev)), np.int32, n)
        kind = self._kinds(cat_ids)
        names = np.fromiter(map(self.names.__getitem__, map(attrgetter("name"), ev)), np.int32, n)
        ts = _field(ev, "ts", np.float64, _to_float)
        self._note_ts(ts)
        p["cat"].append(cat_ids.astype(np.int16))
        p["kind"].append(kind)
        p["name"].append(names)
        p["ts"].append(ts)
        p["dur"].append(_field(ev, "dur", np.float64, _to_float))
        p["tid"].append(_field(ev, "tid", np.int64, self._thread))

        # Args only where they mean something: one pass per field over that group of events.
        host_op = (kind == CPU_OP) | (kind == USER_ANNOTATION) | (kind == PYTHON)
        gpu = (kind == KERNEL) | (kind == MEMCPY) | (kind == MEMSET)
        linked = ~host_op                                   # runtime, GPU work, syncs, the rest
        shaped = kind == CPU_OP  # every op's shapes feed the work model (analysis/work/op_work.py)
        # HTA counts any event with an integer stream arg as GPU work (inductor's cpu_ops carry one).
        args = list(map(attrgetter("args"), ev))  # once: every args column below reads from this list
        p["stream"].append(_field(args, "stream", np.int64, _to_int))
        p["correlation"].append(self._group(args, linked, "correlation", np.int64, -1, _to_int))
        p["device"].append(self._group(args, gpu, "device", np.int64, -1, _to_int))
        external = self._group(args, gpu | (kind == CPU_OP), "external_id", np.int64, -1, _to_int)
        lower = gpu & (external < 0)
        if lower.any():
            external[lower] = self._group(args, lower, "external_id_2021", np.int64, -1, _to_int)[lower]
        p["external_id"].append(external)
        p["nbytes"].append(self._group(args, gpu & (kind != KERNEL), "bytes", np.float64, NAN, _to_float))
        kernels = kind == KERNEL
        p["grid"].append(self._dims(args, kernels, "grid"))
        p["block"].append(self._dims(args, kernels, "block"))
        p["shape"].append(self._raw_ids(args, shaped, "input_dims", self.shapes))
        p["dtype"].append(self._raw_ids(args, shaped, "input_type", self.dtypes))
        p["concrete"].append(self._raw_ids(args, shaped, "concrete_inputs", self.concretes))
        if not comm:
            return np.zeros(0, dtype=np.int64)
        return self._candidates(cat_ids, names, lambda carries: np.fromiter(
            map(is_not, map(attrgetter("collective"), map(args.__getitem__, carries.tolist())), repeat(None)),
            bool, carries.size))

    def _candidates(self, cat_ids: np.ndarray, names: np.ndarray, collective) -> np.ndarray:
        """Events that may be a collective's record (comm_args._record decides): a kernel or record_param_comms
        with a "Collective name", a nccl:* range; judged once per distinct category and name, the arg only
        where those allow it (collective(rows): whether each of those events has one)."""
        for table, flags, judge in ((self.cats, self._comm_cat, lambda c: 1 * may_carry_args(c) + 2 * may_annotate(c)),
                                    (self.names, self._comm_name,
                                     lambda m: 1 * (m == "record_param_comms") + 2 * m.startswith("nccl:"))):
            flags.extend(map(judge, table.order[len(flags):]))
        cat = np.asarray(self._comm_cat, dtype=np.int8)[cat_ids]
        name = np.asarray(self._comm_name, dtype=np.int8)[names]
        carries = np.flatnonzero(((cat | name) & 1) > 0)
        named = collective(carries)
        ranges = np.flatnonzero((cat & name & 2) > 0)
        return np.union1d(carries[named], ranges)

    @staticmethod
    def _raw_ids(all_args: list[Args], mask: np.ndarray, field: str, table: _Interner) -> np.ndarray:
        """Ids in `table` of a raw JSON arg's text where mask holds and the arg is present, -1 elsewhere (the
        passes run in C: bytes of each value, their lengths, the interning of the present ones)."""
        out = np.full(len(all_args), -1, dtype=np.int32)
        if not mask.any():
            return out
        texts = list(map(bytes, map(attrgetter(field), compress(all_args, mask.tolist()))))
        present = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) > 0
        if present.any():
            ids = np.full(len(texts), -1, dtype=np.int32)
            kept = list(compress(texts, present.tolist()))
            ids[present] = np.fromiter(map(table.__getitem__, kept), dtype=np.int32, count=len(kept))
            out[mask] = ids
        return out

    @staticmethod
    def _group(all_args: list[Args], mask: np.ndarray, field: str, dtype, fill, convert, convert_all=False
               ) -> np.ndarray:
        """An args column read only for the events where mask holds, `fill` elsewhere."""
        out = np.full(len(all_args), fill, dtype=dtype)
        if not mask.any():
            return out
        args = list(compress(all_args, mask.tolist()))
        if convert_all:
            out[mask] = np.fromiter(map(convert, map(attrgetter(field), args)), dtype=dtype, count=len(args))
        else:
            out[mask] = _field(args, field, dtype, convert)
        return out

    @staticmethod
    def _dims(all_args: list[Args], mask: np.ndarray, field: str) -> np.ndarray:
        """The product of a kernel's grid or block dims, -1 where absent or out of range; one array operation
        when every kernel has the same number of dims (as Kineto writes them), else one call per kernel."""
        out = np.full(len(all_args), -1, dtype=np.int64)
        if not mask.any():
            return out
        dims = list(map(attrgetter(field), compress(all_args, mask.tolist())))
        try:
            table = np.array(dims, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):  # None, ragged lists
            table = None
        if table is None or table.ndim != 2 or table.shape[1] == 0:
            out[mask] = np.fromiter(map(_dims_product, dims), dtype=np.int64, count=len(dims))
            return out
        exact = table.prod(axis=1)
        approx = table.astype(np.float64).prod(axis=1)  # the int64 product wraps where this one does not
        out[mask] = np.where((approx >= 0) & (approx < float(1 << 62)) & (exact >= 0), exact, -1)
        return out

    def _add_flows(self, ev: list[Event]) -> None:
        n = len(ev)
        f = self.flow_parts
        ts = _field(ev, "ts", np.float64, _to_float)
        self._note_ts(ts)
        f["id"].append(_field(ev, "id", np.int64, _to_int))
        f["ts"].append(ts)
        f["phase"].append(np.fromiter(map(_PH_CODE.__getitem__, map(attrgetter("ph"), ev)), np.int8, n))

    def export(self) -> dict:
        """This builder's blocks as one picklable part (what a worker process sends back)."""
        columns, flows = self.finish()
        return self._part(columns, flows)

    def _part(self, columns: dict, flows: dict) -> dict:
        return {"columns": columns, "flows": flows, "names": self.names.table(), "cats": self.cats.table(),
                "shapes": self.shapes.table(), "dtypes": self.dtypes.table(), "concretes": self.concretes.table(),
                "threads": self.thread_names.table(),
                "ts_is_float": self.ts_is_float, "first": self.first_event_is_complete, "n_events": self.n_events,
                "comm": self.comm}

    def adopt(self, other: ColumnBuilder) -> None:
        """absorb() another builder of this process without concatenating its blocks first (one copy less)."""
        self.absorb(other._part(dict(other.parts), dict(other.flow_parts)))
        other.parts.clear()
        other.flow_parts.clear()

    def absorb(self, part: dict) -> None:
        """Append a part exported by another builder (or adopted: lists of blocks), translating its string ids
        into ours."""
        if part["n_events"] == 0:
            return
        if self.comm is not None:
            self.comm = None if part["comm"] is None else self.comm + part["comm"]
        if self.first_event_is_complete is None:
            self.first_event_is_complete = part["first"]
        self.n_events += part["n_events"]
        self.ts_is_float |= part["ts_is_float"]
        cols = {k: v if isinstance(v, list) else [v] for k, v in part["columns"].items()}
        for key, table, local in (("name", self.names, part["names"]), ("cat", self.cats, part["cats"]),
                                  ("shape", self.shapes, part["shapes"]), ("dtype", self.dtypes, part["dtypes"]),
                                  ("concrete", self.concretes, part["concretes"])):
            remap = np.fromiter(map(table.__getitem__, local), np.int64, len(local))
            cols[key] = [np.where(col >= 0, remap[np.maximum(col, 0)] if remap.size else col, col).astype(col.dtype)
                         for col in cols[key]]
        if part["threads"]:  # string thread ids are -2 - index into the local table
            remap = np.fromiter((-2 - self.thread_names[t] for t in part["threads"]), np.int64, len(part["threads"]))
            cols["tid"] = [np.where((tid <= -2) & (tid > -2 - remap.size), remap[np.clip(-2 - tid, 0, remap.size - 1)],
                                    tid) for tid in cols["tid"]]
        for key, col in cols.items():
            self.parts[key].extend(col)
        for key, col in part["flows"].items():
            self.flow_parts[key].extend(col if isinstance(col, list) else [col])

    def finish(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        columns = _joined(self.parts, {"cat": np.int16, "kind": np.int8, "name": np.int32, "ts": np.float64,
                                       "dur": np.float64, "tid": np.int64, "stream": np.int64, "device": np.int64,
                                       "correlation": np.int64, "external_id": np.int64, "nbytes": np.float64,
                                       "grid": np.int64, "block": np.int64, "shape": np.int32, "dtype": np.int32,
                                       "concrete": np.int32}, threads=self.n_events >= _JOIN_IN_THREADS)
        flows = _joined(self.flow_parts, {"id": np.int64, "ts": np.float64, "phase": np.int8}, threads=False)
        return columns, flows


def _joined(parts: dict[str, list[np.ndarray]], dtypes: dict, threads: bool) -> dict[str, np.ndarray]:
    """Each key's blocks as one array (taken out of `parts`); with threads, two join side by side (a copy runs
    without the GIL, so two threads fault in the new pages at once)."""
    pending = {key: parts.pop(key, []) for key in dtypes}
    join = lambda key: np.concatenate(pending.pop(key)) if pending[key] else np.zeros(0, dtype=dtypes[key])  # noqa: E731
    if not threads:
        return {key: join(key) for key in dtypes}
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(dtypes, pool.map(join, dtypes)))
