"""Decode a large trace on several cores with threads, when the C scanner reads the blocks (kineto_native.py).

The scanner runs without the GIL, so threads in this process do what worker processes did, without sending
~100 bytes of columns per event back through a pipe. Uncompressed files: each thread reads its own byte range
of the events array (kineto_parallel's ranges, both ends moved to an event boundary). Gzip files: one thread
decompresses and cuts blocks (zlib runs without the GIL too), the caller's thread decodes them.

As with the worker processes, a cut is only checked when its block is decoded; if any block is not valid JSON,
BadCut asks the caller for the sequential reader, which retries cuts and reports errors precisely.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from perflab.trace.sniff import is_gzip, open_binary
from perflab.trace.torch_profiler.json_stream import SYNTAX_ERRORS, EventStream, NotATrace
from perflab.trace.torch_profiler.kineto_events import ColumnBuilder
from perflab.trace.torch_profiler.kineto_parallel import BadCut, range_builder, range_tasks

_AHEAD = 4    # blocks the decompressing thread may cut ahead of the decoder


def decode_threaded(path: Path, block_size: int, threads: int) -> tuple[ColumnBuilder, bytes]:
    """(columns of all events, the metadata document). Raises BadCut to ask for the sequential reader."""
    if is_gzip(path):
        return _decode_gzip(path, block_size)
    tasks, meta = range_tasks(path, threads, block_size)
    builder = ColumnBuilder()
    with ThreadPoolExecutor(threads, thread_name_prefix="perflab-reader") as pool:
        parts = [pool.submit(range_builder, *task) for task in tasks]
        for part in parts:          # in file order: string ids are assigned in order of first appearance
            builder.adopt(part.result())
    return builder, meta


def _decode_gzip(path: Path, block_size: int) -> tuple[ColumnBuilder, bytes]:
    blocks: queue.Queue = queue.Queue(_AHEAD)
    stop = threading.Event()
    done = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                blocks.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def cut() -> None:
        try:
            with open_binary(path) as fh:
                stream = EventStream(fh, block_size)
                for raw in stream.blocks(bytes):
                    if not put(raw):
                        return
                put((done, stream.metadata_document()))
        except BaseException as exc:  # handed to the decoding thread, which raises it there
            put((done, exc))

    cutter = threading.Thread(target=cut, name="perflab-gunzip", daemon=True)
    cutter.start()
    builder = ColumnBuilder()
    try:
        while True:
            item = blocks.get()
            if isinstance(item, tuple) and item[0] is done:
                if isinstance(item[1], NotATrace):
                    raise BadCut("no traceEvents array")
                if isinstance(item[1], BaseException):
                    raise item[1]
                return builder, item[1]
            try:
                builder.add_raw(item)
            except SYNTAX_ERRORS as exc:
                raise BadCut(str(exc)) from None
    finally:
        stop.set()
        cutter.join()
