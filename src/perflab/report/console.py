"""The one terminal boundary: every Rich console perflab prints through.

Text from a file is data. A kernel named `gemm[/data/shard]` must print as itself, not be parsed as
Rich markup (a closing tag that crashes the render); a name holding ESC sequences must not move the
cursor, retitle the window or colour the terminal. So the console perflab uses
- never interprets console markup in strings (styles come from Text and style= arguments), and
- strips control characters (C0 but newline and tab, DEL, C1) from every segment it renders, after
  Rich has laid it out: whatever the renderable, whichever call site.
Rich's own control segments (cursor moves of a live view) pass untouched.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from rich.console import Console
from rich.segment import Segment

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """A string with its terminal control characters removed (newline and tab stay)."""
    return CONTROL.sub("", text)


class SafeConsole(Console):
    def render(self, renderable: Any, options: Any = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control is None and CONTROL.search(seg.text):
                yield Segment(clean(seg.text), seg.style)
            else:
                yield seg


def safe_console(**kwargs: Any) -> SafeConsole:
    """A Console without markup that strips control characters; same arguments as rich's Console."""
    kwargs.setdefault("markup", False)
    return SafeConsole(**kwargs)
