"""Errors that the CLI turns into one line and exit code 2."""
from __future__ import annotations

import re


class PerflabError(Exception):
    """A problem the user can fix: bad input, missing GPU, unknown puzzle. One line, no traceback."""

    exit_code = 2


class UnreadableInput(PerflabError):
    """A file that cannot be read as what it claims to be."""


class NeedsGPU(PerflabError):
    """The command needs a CUDA GPU and none is present."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    """A message as one line of plain text: control characters (a newline in a file name, an ESC sequence from a
    file) shown as escapes (\\n, \\x1b), so the line neither breaks nor drives the terminal."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(), f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                                              else f"\\u{ord(m.group()):04x}"), text.strip())
