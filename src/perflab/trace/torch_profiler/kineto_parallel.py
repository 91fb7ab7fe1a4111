"""Decode a large trace on several cores.

Uncompressed files: the traceEvents array is split into byte ranges; each worker process reads its
range itself, moves both ends to the next event boundary (so neighbours agree on where one stops
and the next starts) and decodes it into columns. Gzip files cannot be read at an offset: the
parent decompresses and cuts blocks and the workers decode them. The parent merges the string
tables.

A cut is only checked when a worker decodes it; if any range turns out not to be valid JSON, the
caller falls back to the sequential reader, which retries cuts and reports errors precisely.
"""
from __future__ import annotations

import io
import multiprocessing as mp
import os
import re
from collections import deque
from pathlib import Path

from perflab.trace.torch_profiler.json_stream import SYNTAX_ERRORS, EventStream, NotATrace, is_object_tail
from perflab.trace.torch_profiler.kineto_events import ColumnBuilder
from perflab.trace.sniff import is_gzip, open_binary

# Below this many bytes of JSON the sequential reader is faster than starting workers.
PARALLEL_MIN_BYTES = 48 << 20
TASKS_PER_WORKER = 4
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_UNFINISHED = re.compile(rb"\}\s*(?:,\s*)?\Z")
_ARRAY_END = re.compile(rb"\}\s*\]")
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_HEAD = 64 << 20
_WINDOW_MAX = 16 << 20
_TAIL = 1 << 20


class BadCut(Exception):
    """A worker could not decode its part; read sequentially instead."""


def json_size(path: Path) -> int:
    """Bytes of JSON the reader will decode: for a gzip file its trailer's length (mod 2**32, so never less than
    the compressed size: a file whose JSON wraps past 4 GiB is far above the threshold either way)."""
    size = path.stat().st_size
    if size < 18:
        return size
    with open(path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            return size
        fh.seek(-4, os.SEEK_END)
        return max(size, int.from_bytes(fh.read(4), "little"))


def worker_count(json_bytes: int) -> int:
    if json_bytes < PARALLEL_MIN_BYTES or os.environ.get("PERFLAB_READER_PROCESSES") == "1":
        return 1
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:
        available = os.cpu_count() or 1
    wanted = int(os.environ.get("PERFLAB_READER_PROCESSES", available))
    return max(1, min(wanted, available, 8))


def _decode(document: bytes, block_size: int) -> dict:
    builder = ColumnBuilder()
    try:
        for _ in EventStream(io.BytesIO(document), block_size).blocks(builder.add_raw):
            pass
    except (ValueError, *SYNTAX_ERRORS) as exc:
        raise BadCut(str(exc)) from None
    return builder.export()


class _RangeReader(io.RawIOBase):
    """`{"traceEvents":[` + bytes [start, end) of a file + `]}`, read without building it in memory."""

    def __init__(self, path: str, start: int, end: int) -> None:
        self._fh = open(path, "rb")
        self._fh.seek(start)
        self._left = end - start
        self._prefix, self._suffix = b'{"traceEvents":[', b"]}"

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        view = memoryview(buf).cast("B")
        if self._prefix:
            return self._serve(view, "_prefix")
        if self._left > 0:
            n = self._fh.readinto(view[: min(len(view), self._left)]) or 0
            self._left = self._left - n if n else 0  # 0: the file is shorter than it was
            if n:
                return n
        return self._serve(view, "_suffix") if self._suffix else 0

    def _serve(self, view: memoryview, name: str) -> int:
        pending = getattr(self, name)
        n = min(len(view), len(pending))
        view[:n] = pending[:n]
        setattr(self, name, pending[n:])
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


def _event_span(path: str, lo: int, hi: int, array_end: int, first: bool) -> tuple[int, int] | None:
    """File offsets [start, end) of the events starting in [lo, hi): both ends moved to a boundary, found by the
    same search, so that neighbours agree on where one range stops and the next starts."""
    with open(path, "rb") as fh:
        start = lo
        if not first:
            found = _boundary(fh, lo, min(hi, array_end))
            if found is None:
                return None  # no event starts in this range
            start = found[1]
        found = _boundary(fh, max(hi, start), array_end)
    return start, (found[0] + 1 if found is not None else array_end)


def _boundary(fh, lo: int, limit: int) -> tuple[int, int] | None:
    """(offset of the `}`, offset of the `{`) of the first event boundary whose `}` lies in [lo, limit), read in
    growing windows (never a whole range at once: a range is a share of a multi-GB file)."""
    pos, window = lo, 1 << 16
    while pos < limit:
        fh.seek(pos)
        chunk = fh.read(window)
        m = _BOUNDARY.search(chunk)
        if m is not None:
            return (pos + m.start(), pos + m.end() - 1) if pos + m.start() < limit else None
        if len(chunk) < window:
            return None  # the end of the file
        unfinished = _UNFINISHED.search(chunk)  # a boundary the window cut: read again from its `}`
        pos += unfinished.start() if unfinished is not None else len(chunk)
        window = min(window * 2, _WINDOW_MAX)  # a long run of whitespace is read in pieces, not at once
    return None


def range_builder(path: str, lo: int, hi: int, array_end: int, first: bool, block_size: int) -> ColumnBuilder:
    """The columns of the events starting in [lo, hi) of the file (a worker's or a reader thread's share)."""
    builder = ColumnBuilder()
    span = _event_span(path, lo, hi, array_end, first)
    if span is None:
        return builder
    try:
        with io.BufferedReader(_RangeReader(path, *span), buffer_size=1 << 16) as reader:
            for _ in EventStream(reader, block_size).blocks(builder.add_raw):
                pass
    except (ValueError, *SYNTAX_ERRORS) as exc:
        raise BadCut(str(exc)) from None
    return builder


def _decode_range(task: tuple[str, int, int, int, bool, int]) -> dict:
    return range_builder(*task).export()


def range_tasks(path: Path, workers: int, block_size: int) -> tuple[list[tuple], bytes]:
    """(range_builder's arguments for each share of the events array, in file order; the metadata document)."""
    head, first, last, tail = _array_bounds(path)
    n_tasks = workers * TASKS_PER_WORKER   # several per worker: one slow range is not the end
    step = max(1, (last - first) // n_tasks)
    edges = [first + i * step for i in range(n_tasks)] + [last]
    tasks = [(str(path), lo, hi, last, i == 0, block_size) for i, (lo, hi) in enumerate(zip(edges, edges[1:]))]
    return tasks, head + b'"traceEvents":[]' + tail


def _array_bounds(path: Path) -> tuple[bytes, int, int, bytes]:
    """(head text, offset of the first event, offset just after the last event's '}', tail text)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(min(size, _HEAD))
        m = _KEY.search(head)
        if m is None or not head[: m.start()].lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
            raise BadCut("no top-level traceEvents key near the start")
        tail_at = max(m.end(), size - _TAIL)
        fh.seek(tail_at)
        tail = fh.read()
    for e in _ARRAY_END.finditer(tail):
        rest = tail[e.end():]
        if is_object_tail(rest):
            return head[: m.start()], m.end(), tail_at + e.start() + 1, rest
    raise BadCut("no end of the traceEvents array near the end")


def _gzip_tasks(stream: EventStream, per_task: int):
    batch: list[bytes] = []
    size = 0
    for raw in stream.blocks(bytes):
        batch.append(raw[1:-1])
        size += len(raw)
        if size >= per_task:
            yield b'{"traceEvents":[' + b",".join(batch) + b"]}"
            batch, size = [], 0
    if batch:
        yield b'{"traceEvents":[' + b",".join(batch) + b"]}"


def decode_parallel(path: Path, block_size: int, workers: int) -> tuple[ColumnBuilder, bytes]:
    """(columns of all events, the metadata document). Raises BadCut to ask for the sequential reader."""
    builder = ColumnBuilder()
    with mp.get_context("fork").Pool(workers) as pool:
        if is_gzip(path):
            with open_binary(path) as fh:
                stream = EventStream(fh, block_size)
                try:
                    # at most two blocks per worker in flight: Pool.imap would decompress the whole file ahead
                    # of the workers and hold it in the parent
                    pending: deque = deque()
                    for doc in _gzip_tasks(stream, 8 << 20):
                        pending.append(pool.apply_async(_decode, (doc, block_size)))
                        if len(pending) >= 2 * workers:
                            builder.absorb(pending.popleft().get())
                    while pending:
                        builder.absorb(pending.popleft().get())
                except NotATrace:
                    raise BadCut("no traceEvents array") from None
                return builder, stream.metadata_document()
        tasks, meta = range_tasks(path, workers, block_size)
        for part in pool.imap(_decode_range, tasks):
            builder.absorb(part)
    return builder, meta
