"""Opening an input file: gzip recognized by its content and decompressed within read_limits' bound; a pipe, device
or socket refused before anything opens it."""
from __future__ import annotations

import gzip
import os
import stat
from pathlib import Path
from typing import BinaryIO

from perflab.errors import UnreadableInput
from perflab.trace.read_limits import BoundedReader, decompressed_limit


def is_gzip(path: Path) -> bool:
    """Whether the file's content is gzip (by its magic bytes, whatever its name)."""
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def open_binary(path: Path) -> BinaryIO:
    """Open a file for reading, transparently gunzipping it when its content is gzip; decompressing stops with one
    line past read_limits.decompressed_limit (a compression bomb)."""
    path = Path(path)
    if is_gzip(path):
        return BoundedReader(gzip.open(path, "rb"), path, decompressed_limit(path))  # type: ignore[return-value]
    return open(path, "rb")


_SPECIAL = ((stat.S_ISFIFO, "a FIFO (a pipe)"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISSOCK, "a socket"))


def refuse_special(path: Path) -> None:
    """A pipe, device or socket as input is one line, before anything opens it (opening a FIFO with no writer
    would wait forever): perflab reads a file more than once, to recognize it and then to read it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    for test, what in _SPECIAL:
        if test(mode):
            raise UnreadableInput(f"{path} is {what}, not a file: perflab reads its input more than once (to recognize "
                                  f"it, then to read it); save it to a file first, e.g. cat {path} > trace.json.gz")
