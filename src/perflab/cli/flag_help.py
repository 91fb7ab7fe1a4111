"""Typer 0.29's help shows a flag's value type (`--json <bool>`) as if it took a value; a flag takes none, so
its type column stays empty, as click's own help has it. Without those internals (another typer) nothing changes."""
from __future__ import annotations

from typing import Any


def install() -> None:
    try:
        from typer import core
    except ImportError:
        return
    cls = getattr(core, "TyperOption", None)
    shown = getattr(cls, "display_type_rich", None)
    if shown is None or getattr(cls, "_perflab_flags", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        if getattr(self, "is_flag", False) and not getattr(self, "count", False):
            return None
        return shown(self, ctx)

    cls.display_type_rich = display_type_rich
    cls._perflab_flags = True
