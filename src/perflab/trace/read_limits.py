"""What a small file may become while it is read: the readers' two limits, each with the setting that raises it.

- Decompressed size: a gzip file is read through `BoundedReader`, which stops with one line once the content
  passes `decompressed_limit(path)`: PERFLAB_MAX_DECOMPRESSED (bytes, or with K/M/G/T) when set, else 200 x the
  size on disk and at least 64 MiB. Profiler JSON compresses 15-60x (the real traces beside this repository);
  a gzip of whitespace compresses about 1000x.
- JSON depth: `json_depth(path)` runs the decoding with room for PERFLAB_MAX_JSON_DEPTH nested levels (default
  512; profilers write 4 or 5) and turns what lies deeper into one line instead of a RecursionError.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path
from typing import BinaryIO, Iterator

from perflab.errors import PerflabError, UnreadableInput

MAX_DECOMPRESSED_ENV = "PERFLAB_MAX_DECOMPRESSED"
MAX_DEPTH_ENV = "PERFLAB_MAX_JSON_DEPTH"
RATIO = 200
MIN_LIMIT = 64 << 20
DEFAULT_DEPTH = 512
DEPTH_CEILING = 10_000   # msgspec and json overflow an 8 MB C stack between 20,000 and 40,000 levels
_FRAMES = 200   # Python frames the reader itself may stack above the decoder
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _setting(name: str, text: str, units: bool) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)i?B?\s*" if units else r"\s*(\d+)\s*", text, re.IGNORECASE)
    if not m or int(m.group(1)) <= 0:
        example = "8G" if units else "2000"
        raise PerflabError(f"{name}={text!r}: give a positive number{' of bytes (K, M, G, T allowed)' if units else ''}"
                           f", e.g. {name}={example}")
    return int(m.group(1)) * (_UNITS[(m.group(2) or "").upper()] if units else 1)


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def decompressed_limit(path: Path) -> int:
    text = os.environ.get(MAX_DECOMPRESSED_ENV)
    if text:
        return _setting(MAX_DECOMPRESSED_ENV, text, units=True)
    return max(MIN_LIMIT, RATIO * path.stat().st_size)


class BoundedReader(io.RawIOBase):
    """A decompressing file that raises UnreadableInput (one line, naming the setting) past `limit` bytes."""

    def __init__(self, raw: BinaryIO, path: Path, limit: int) -> None:
        self._raw, self._path, self._limit, self._total = raw, path, limit, 0

    def readable(self) -> bool:
        return True

    def _count(self, n: int) -> None:
        self._total += n
        if self._total > self._limit:
            on_disk = self._path.stat().st_size
            raise UnreadableInput(
                f"{self._path}: decompresses to more than {human(self._limit)} (its {human(on_disk)} on disk grew "
                f"{self._total / max(on_disk, 1):.0f}x; traces compress 15-60x): a compression bomb or a damaged "
                f"file; to read it anyway set {MAX_DECOMPRESSED_ENV}, e.g. {MAX_DECOMPRESSED_ENV}="
                f"{max(4 * self._limit >> 30, 1)}G")

    def readinto(self, buf) -> int:
        with memoryview(buf) as view, view.cast("B") as flat:
            n = self._raw.readinto(flat[: self._limit - self._total + 1]) or 0
        self._count(n)
        return n

    def read(self, size: int | None = -1) -> bytes:
        if size is not None and size >= 0:
            data = self._raw.read(min(size, self._limit - self._total + 1))
            self._count(len(data))
            return data
        parts = []
        while chunk := self.read(1 << 20):  # never more than the limit at once
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def _depth_now() -> int:
    frame, n = sys._getframe(), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


def max_json_depth() -> int:
    text = os.environ.get(MAX_DEPTH_ENV)
    depth = _setting(MAX_DEPTH_ENV, text, units=False) if text else DEFAULT_DEPTH
    if depth > DEPTH_CEILING:
        raise PerflabError(f"{MAX_DEPTH_ENV}={text}: at most {DEPTH_CEILING} (the decoders recurse once per level; "
                           "deeper would overflow the C stack)")
    return depth


def too_deep(path: Path, depth: int | None = None) -> UnreadableInput:
    depth = depth or max_json_depth()
    raise_it = (f"to read it anyway set {MAX_DEPTH_ENV} (at most {DEPTH_CEILING}), e.g. "
                f"{MAX_DEPTH_ENV}={min(depth * 4, DEPTH_CEILING)}" if depth < DEPTH_CEILING
                else "that is as deep as perflab reads")
    return UnreadableInput(f"{path}: JSON nested more than {depth} levels deep (profilers write 4 or 5): not a trace "
                           f"perflab reads; {raise_it}")


@contextlib.contextmanager
def json_depth(path: Path) -> Iterator[None]:
    """Decoding in this block reaches at least max_json_depth() levels (Python's recursion limit is what msgspec's
    and the stdlib's decoders count nesting against: raised for the block, never lowered, as other threads run
    under it too); what lies deeper is one line naming the setting, not a RecursionError."""
    depth = max_json_depth()
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, _depth_now() + _FRAMES + depth))
    try:
        yield
    except RecursionError:
        raise too_deep(path, depth) from None
    finally:
        sys.setrecursionlimit(old)
