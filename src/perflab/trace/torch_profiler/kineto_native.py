"""The reader's fast path: a block of events scanned into columns in C (native/kineto_scan.c), no Python object
per event.

The scanner takes only the common, well-typed case and returns None for anything else (then the block goes the
msgspec way, which decides exactly as before, errors included). What it returns is turned into the very columns
and string tables `ColumnBuilder` builds from msgspec structs: the same masks decide which arg is read for which
event, and strings get their ids in the same order of first appearance. `PERFLAB_NATIVE=0` turns it off.
"""
from __future__ import annotations

import os
from typing import Callable

import msgspec
import numpy as np

from perflab.trace.model import CPU_OP, KERNEL, MEMCPY, MEMSET, PYTHON, USER_ANNOTATION
from perflab.trace.torch_profiler.comm_args import struct_records
from perflab.trace.torch_profiler.kineto_structs import CommEvent

try:
    from perflab.trace.torch_profiler._kineto_scan import Scanner
except ImportError:  # not built (no C compiler at install time): the msgspec path reads everything
    Scanner = None

# column order of kineto_scan.c's Row
(PH, CAT, NAME, TS, DUR, TID, TIDSTR, ID, STREAM, DEVICE, CORR, EXT, EXT2021, BYTES, GRID, BLOCK, DIMS, TYPES,
 CONCRETE, COLL, START, END) = range(22)
_DTYPES = (np.int8, np.int32, np.int32, np.float64, np.float64, np.int64, np.int32, np.int64, np.int64, np.int64,
           np.int64, np.int64, np.int64, np.float64, np.int64, np.int64, np.int32, np.int32, np.int32, np.int8,
           np.int64, np.int64)
T_CAT, T_NAME, T_TIDSTR, T_DIMS, T_TYPES, T_CONCRETE = range(6)
_TEXT_TABLES = (T_CAT, T_NAME, T_TIDSTR)   # JSON string contents, escapes and all; the others stay raw bytes
_EMPTY_PH = 8                              # "" or no "ph": counts as an unknown phase, but may be a comm record
_str = msgspec.json.Decoder(str)
_comm_events = msgspec.json.Decoder(list[CommEvent])


def available() -> bool:
    return Scanner is not None and os.environ.get("PERFLAB_NATIVE", "1") != "0"


class _Table:
    """One scanner table: its entries by local id and, per local id, the builder's value once assigned."""

    def __init__(self, text: bool) -> None:
        self.text = text
        self.entries: list = []
        self.value = np.zeros(0, dtype=np.int64)
        self.known = np.zeros(0, dtype=bool)
        self.bad: list[int] = []      # entries msgspec would not decode (never seen: the scanner bails first)

    def extend(self, raw: list[bytes]) -> None:
        base = len(self.entries)
        for i, b in enumerate(raw):
            if self.text:
                try:
                    b = _str.decode(b'"' + b + b'"')
                except (msgspec.DecodeError, UnicodeDecodeError):
                    self.bad.append(base + i)
                    b = None
            self.entries.append(b)
        grow = len(self.entries) - self.value.size
        if grow > 0:
            self.value = np.concatenate([self.value, np.zeros(grow, dtype=np.int64)])
            self.known = np.concatenate([self.known, np.zeros(grow, dtype=bool)])

    def values(self, local: np.ndarray, assign: Callable) -> np.ndarray:
        """The builder's values for these local ids (rows in order); new ones assigned in order of first
        appearance, as the msgspec path's interning does."""
        new = ~self.known[local]
        if new.any():
            fresh, first = np.unique(local[new], return_index=True)
            for k in fresh[np.argsort(first, kind="stable")].tolist():
                self.value[k] = assign(self.entries[k])
                self.known[k] = True
        return self.value[local]


class NativeBlocks:
    """Feeds a ColumnBuilder from the C scanner."""

    def __init__(self, builder) -> None:
        self.b = builder
        self.scanner = Scanner()
        self.tables = [_Table(t in _TEXT_TABLES) for t in range(6)]

    def add(self, raw) -> bool:
        """Add one JSON array of events; False (nothing added) when the msgspec path must read it."""
        got = self.scanner.scan(raw)
        if got is None:
            return False
        n, buffers, new = got
        for table, entries in zip(self.tables, new):
            table.extend(entries)
        cols = [np.frombuffer(buf, dtype) for buf, dtype in zip(buffers, _DTYPES)]
        if any(t.bad for t in self.tables) and self._uses_bad(cols):
            return False
        if n == 0:
            return True
        b = self.b
        phase = cols[PH]
        if b.first_event_is_complete is None:
            b.first_event_is_complete = bool(phase[0] == 0)
        b.n_events += n
        rows = np.flatnonzero(phase == 0)
        candidates = self._complete(cols, rows) if rows.size else np.zeros(0, dtype=np.int64)
        if b.comm is not None:
            picked = np.union1d(rows[candidates], np.flatnonzero(phase == _EMPTY_PH))
            if picked.size:
                self._comm(raw, cols, picked)
        flows = np.flatnonzero((phase >= 1) & (phase <= 3))
        if flows.size:
            ts = cols[TS][flows]
            b._note_ts(ts)
            b.flow_parts["id"].append(cols[ID][flows])
            b.flow_parts["ts"].append(ts)
            b.flow_parts["phase"].append(phase[flows])
        return True

    def _uses_bad(self, cols: list[np.ndarray]) -> bool:
        for t, col in ((T_CAT, CAT), (T_NAME, NAME), (T_TIDSTR, TIDSTR)):
            if self.tables[t].bad and np.isin(cols[col], self.tables[t].bad).any():
                return True
        return False

    def _complete(self, cols: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
        """ColumnBuilder._add_complete on scanned columns; which complete events may be a collective's record."""
        b, p, t = self.b, self.b.parts, self.tables
        cat_ids = t[T_CAT].values(cols[CAT][rows], b.cats.__getitem__).astype(np.int32)
        kind = b._kinds(cat_ids)
        names = t[T_NAME].values(cols[NAME][rows], b.names.__getitem__).astype(np.int32)
        ts = cols[TS][rows]
        b._note_ts(ts)
        tid = cols[TID][rows]
        named = cols[TIDSTR][rows]
        text = named >= 0
        if text.any():
            tid = tid.copy()
            tid[text] = t[T_TIDSTR].values(named[text], b._thread)
        p["cat"].append(cat_ids.astype(np.int16))
        p["kind"].append(kind)
        p["name"].append(names)
        p["ts"].append(ts)
        p["dur"].append(cols[DUR][rows])
        p["tid"].append(tid)

        host_op = (kind == CPU_OP) | (kind == USER_ANNOTATION) | (kind == PYTHON)
        gpu = (kind == KERNEL) | (kind == MEMCPY) | (kind == MEMSET)
        kernels = kind == KERNEL
        p["stream"].append(cols[STREAM][rows])
        p["correlation"].append(np.where(~host_op, cols[CORR][rows], -1))
        p["device"].append(np.where(gpu, cols[DEVICE][rows], -1))
        external = np.where(gpu | (kind == CPU_OP), cols[EXT][rows], -1)
        lower = gpu & (external < 0)
        external[lower] = cols[EXT2021][rows][lower]
        p["external_id"].append(external)
        p["nbytes"].append(np.where(gpu & ~kernels, cols[BYTES][rows], np.nan))
        p["grid"].append(np.where(kernels, cols[GRID][rows], -1))
        p["block"].append(np.where(kernels, cols[BLOCK][rows], -1))
        shaped = kind == CPU_OP
        for key, table, col, dest in (("shape", T_DIMS, DIMS, b.shapes), ("dtype", T_TYPES, TYPES, b.dtypes),
                                      ("concrete", T_CONCRETE, CONCRETE, b.concretes)):
            local = cols[col][rows]
            keep = shaped & (local >= 0)
            out = np.full(rows.size, -1, dtype=np.int32)
            if keep.any():
                out[keep] = t[table].values(local[keep], dest.__getitem__)
            p[key].append(out)
        if b.comm is None:
            return np.zeros(0, dtype=np.int64)
        coll = cols[COLL][rows]
        return b._candidates(cat_ids, names, lambda carries: coll[carries] > 0)

    def _comm(self, raw, cols: list[np.ndarray], picked: np.ndarray) -> None:
        """The collectives' records among the picked events: those events alone decoded as CommEvent structs
        (the scanner checked every field that decoder types, so it cannot fail where the block did not)."""
        view = memoryview(raw)
        parts = [view[s:e] for s, e in zip(cols[START][picked].tolist(), cols[END][picked].tolist())]
        doc = b"[" + b",".join(parts) + b"]"
        self.b.comm.extend(struct_records(_comm_events.decode(doc)))
