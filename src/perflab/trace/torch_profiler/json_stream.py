"""Stream the `traceEvents` array of a Chrome/Kineto JSON document in blocks of whole events.

A multi-GB trace cannot be decoded into Python objects at once. We cut the array at event
boundaries (`}` `,` `{` between two events) and hand each block, as a JSON array, to a decoder.
A wrong cut (the pattern inside a string or a nested list of objects) always yields invalid JSON,
so the decoder itself verifies every cut; on a syntax error we retry at an earlier boundary.

The file is read into one reused bytearray and a block is turned into a JSON array in place, by
overwriting the separator bytes around it with `[` and `]`: fresh multi-MB buffers cost more in
page faults than the decoding itself.
"""
from __future__ import annotations

import re
from typing import BinaryIO, Callable, Iterator, TypeVar

import msgspec

T = TypeVar("T")

_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
_SPACE = re.compile(rb"\s*")
_TAIL_START = re.compile(rb"\s*[,}]")
# a whole string (skipped), a lone quote (a string the buffer does not hold the end of), or a long whitespace run
_TOKEN_OR_SPACE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|(?P<space>[ \t\r\n]{256,})')
_HEAD_LIMIT = 64 << 20       # metadata before traceEvents larger than this: not a Kineto trace
_LOOKAHEAD = 256 << 10       # never cut this close to the end before EOF is known (the tail lives there)
_RETRIES = 3
_OPEN, _CLOSE = ord("["), ord("]")
# What a decoder raises on text that is not valid JSON (invalid UTF-8 surfaces as UnicodeDecodeError).
SYNTAX_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)


class NotATrace(ValueError):
    """The document has no top-level traceEvents array."""


class LayoutError(ValueError):
    """The events could not be cut into valid blocks (invalid JSON or an unusual layout)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class EventStream:
    """Iterate decoded blocks of events; afterwards `head` and `tail` hold the surrounding text.

    Invariant while streaming: buf[lo] is the byte just before the next event's `{`
    (the array's `[` or a separator), so it can be overwritten with `[`.
    """

    def __init__(self, fh: BinaryIO, block_size: int = 1 << 20) -> None:
        self._fh = fh
        self._block = max(int(block_size), 1024)
        self._buf = bytearray(self._block + min(_LOOKAHEAD, self._block) + 4096)
        self._lo = 0
        self._hi = 0
        self._eof = False
        self._consumed = 0  # document bytes dropped from the front of the buffer
        self.head = b""
        self.tail = b""

    def metadata_document(self) -> bytes:
        """The document with an empty traceEvents array: small, decodes to the metadata."""
        return self.head + b'"traceEvents":[]' + self.tail

    def blocks(self, decode: Callable[[memoryview], T]) -> Iterator[T]:
        self._find_array_start()
        lookahead = min(_LOOKAHEAD, self._block)
        while True:
            self._fill(self._block + lookahead)
            if self._eof:
                result = self._final_block(decode)
                if result is not None:
                    yield result[0]
                return
            cut = self._decode_at_boundary(decode, self._hi - lookahead)
            if cut is None:  # one event larger than a block, or a run of whitespace: read on
                if not self._squeeze():
                    self._block *= 2
                continue
            result, next_lo = cut
            self._lo = next_lo
            yield result

    # -- reading -------------------------------------------------------------------------
    def _read(self) -> None:
        if self._hi == len(self._buf):
            self._compact()
            if self._hi == len(self._buf):
                self._buf.extend(bytes(len(self._buf)))
        with memoryview(self._buf) as mv, mv[self._hi:] as free:
            n = self._fh.readinto(free)
        if not n:
            self._eof = True
        else:
            self._hi += n

    def _compact(self) -> None:
        if self._lo:
            size = self._hi - self._lo
            self._buf[:size] = self._buf[self._lo:self._hi]
            self._consumed += self._lo
            self._hi, self._lo = size, 0

    def _fill(self, size: int) -> None:
        if self._hi - self._lo < size and len(self._buf) - self._lo < size:
            self._compact()
        if len(self._buf) < size + 1:
            self._buf.extend(bytes(size + 1 - len(self._buf)))
        while self._hi - self._lo < size and not self._eof:
            self._read()

    def _find_array_start(self) -> None:
        searched = 0
        while True:
            m = _KEY.search(self._buf, max(0, searched - 64), self._hi)
            if m:
                break
            searched = self._hi
            if self._eof or searched > _HEAD_LIMIT:
                raise NotATrace("no traceEvents array")
            self._read()
        head = bytes(self._buf[: m.start()])
        if not head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
            raise NotATrace("the document is not a JSON object with traceEvents")
        self.head = head
        self._lo = m.end() - 1  # the '['

    def _squeeze(self) -> bool:
        """Shorten every long run of whitespace between tokens after the next event's start to one space (a
        string's content is left as it is): whatever the whitespace, the buffer holds what the events need.
        True if it freed at least a quarter of the buffered bytes."""
        buf, lo, hi = self._buf, self._lo, self._hi
        out, kept, write = [], lo + 1, lo + 1
        for m in _TOKEN_OR_SPACE.finditer(buf, lo + 1, hi):
            if m.group(0) == b'"':
                break  # a string that does not end in the buffer: what follows may be inside it
            if m.lastgroup == "space":
                out.append((kept, m.start()))
                kept = m.end() - 1  # keep one space
        if not out:
            return False
        for a, b in out + [(kept, hi)]:
            size = b - a
            buf[write:write + size] = buf[a:b]
            write += size
        freed = hi - write
        self._hi = write
        self._consumed += freed  # error offsets past a squeezed run are approximate by this much
        return freed * 4 >= hi - lo

    # -- cutting -------------------------------------------------------------------------
    def _decode_span(self, decode: Callable[[memoryview], T], last: int) -> T:
        """Decode buf[lo..last] with '[' at lo and ']' at last; the bytes are restored on failure."""
        buf, first = self._buf, self._lo
        saved = buf[first], buf[last]
        buf[first], buf[last] = _OPEN, _CLOSE
        view = memoryview(buf)[first:last + 1]
        try:
            return decode(view)
        except SYNTAX_ERRORS:
            buf[first], buf[last] = saved
            raise
        finally:
            try:
                view.release()
            except BufferError:  # a decoded object still refers to the block; harmless
                pass

    def _decode_at_boundary(self, decode, region_end: int):
        error: Exception | None = None
        for m in _last_boundaries(self._buf, self._lo, region_end, _RETRIES):
            try:
                return self._decode_span(decode, m.start() + 1), m.end() - 2
            except msgspec.ValidationError:
                raise
            except SYNTAX_ERRORS as exc:
                error = exc
        if error is not None:
            raise LayoutError(f"invalid JSON in traceEvents ({error})", self._consumed + self._lo)
        return None

    def _final_block(self, decode):
        buf, lo, hi = self._buf, self._lo, self._hi
        first = _SPACE.match(buf, lo + 1, hi).end()
        if first < hi and buf[first] == _CLOSE:
            tail = bytes(buf[first + 1:hi])
            if is_object_tail(tail):
                self.tail = tail
                return None
        for m in _ARRAY_END.finditer(buf, lo, hi):
            if not _TAIL_START.match(buf, m.end(), hi):
                continue
            tail = bytes(buf[m.end():hi])
            if not is_object_tail(tail):
                continue
            self.tail = tail
            try:
                return (self._decode_span(decode, m.start() + 1),)
            except msgspec.ValidationError:
                raise
            except SYNTAX_ERRORS as exc:
                raise LayoutError(f"invalid JSON in traceEvents ({exc})", self._consumed + lo) from None
        raise LayoutError("the traceEvents array or the document is not closed (truncated file?)",
                          self._consumed + hi)


def _last_boundaries(buf: bytearray, lo: int, region_end: int, count: int) -> list[re.Match]:
    """The last `count` event boundaries between lo and region_end, latest first."""
    window = 1 << 16
    start = max(lo, region_end - window)
    while True:
        found = list(_BOUNDARY.finditer(buf, start, max(start, region_end)))
        if len(found) >= count or start == lo:
            return found[::-1][:count]
        window *= 4
        start = max(lo, region_end - window)


def is_object_tail(tail: bytes) -> bool:
    """True if `tail` is what may follow the events array: more members, then the closing brace."""
    try:
        return isinstance(msgspec.json.decode(b'{"_":0' + tail), dict)
    except SYNTAX_ERRORS:
        return False
