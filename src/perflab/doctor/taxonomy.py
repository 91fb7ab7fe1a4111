"""The bottleneck taxonomy as it ships with the package: taxonomy.md (the project's TAXONOMY.md) for each id's
level, meaning and evidence, taxonomy_fixes.toml for the usual fix. `perflab taxonomy [ID]` prints them."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from perflab.errors import PerflabError

_ROW = re.compile(r"^\|\s*`([a-z0-9-]+)`\s*\|(.*)\|\s*$")


@dataclass(frozen=True)
class Entry:
    id: str
    level: str
    meaning: str
    evidence: str
    fix: str


def _text(name: str) -> str:
    return resources.files("perflab.doctor").joinpath(name).read_text(encoding="utf-8")


def table_rows(markdown: str) -> list[tuple[str, ...]]:
    """(id, level, meaning, evidence) for every id row of a TAXONOMY.md table."""
    rows = []
    for line in markdown.splitlines():
        m = _ROW.match(line.strip())
        if m:
            rows.append((m.group(1), *(c.strip() for c in m.group(2).split(" | "))))
    return rows


@lru_cache(maxsize=1)
def entries() -> dict[str, Entry]:
    """Every id in the taxonomy's order (coarse levels first)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    fixes = tomllib.loads(_text("taxonomy_fixes.toml"))
    return {row[0]: Entry(*row[:4], fix=fixes.get(row[0], "")) for row in table_rows(_text("taxonomy.md"))}


def lookup(tid: str) -> Entry:
    table = entries()
    if tid in table:
        return table[tid]
    near = [t for t in table if tid and (tid in t or t in tid)]
    hint = f"; did you mean {', '.join(near[:3])}?" if near else ""
    raise PerflabError(f"{tid!r} is not a taxonomy id{hint} (perflab taxonomy lists them)")


def plain(text: str) -> str:
    """The markdown of a cell as plain text (`code` spans unquoted)."""
    return text.replace("`", "")
