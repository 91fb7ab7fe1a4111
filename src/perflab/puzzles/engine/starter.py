"""The starter: what `perflab start` copies into the learner's workspace, derived from the puzzle's one copy
of its slow workload. The code is workload.py's, unchanged, so the starter runs on its own and checks as the
slow workload does; its docstring opens with the starter's title and puzzle.toml's [starter] header (what to
do, the rules, the goal), then goes on with the workload's own text. A puzzle folder may still ship its
own starter.py, which is then used as it is.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from perflab.paths import cache_dir

TITLE = "{name}: your copy to fix (the slow workload, as it is)."


def starter_source(puzzle: Any) -> str:
    lines = puzzle.file("slow").read_text(encoding="utf-8").split("\n")
    documented = lines[0].startswith('"""') and len(lines) > 1   # the title names the puzzle: "<name>: ..."
    name = lines[0][3:].split(": ", 1)[0] if documented else puzzle.id
    header = puzzle.starter.header.removeprefix("\n").removesuffix("\n")
    head = ['"""' + (puzzle.starter.title or TITLE.format(name=name))] + (["", *header.split("\n")] if header else [])
    if not documented:
        return "\n".join(head + ['"""'] + lines)
    rest = lines[2:] if header and not lines[1].strip() else lines[1:]
    return "\n".join(head + rest)


def starter_file(puzzle: Any) -> Path:
    """The derived starter as a file (in perflab's cache, one per content): what the checker and recording run."""
    text = starter_source(puzzle)
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    path = cache_dir("starters") / f"{puzzle.id}-{key}.py"
    if not path.is_file():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return path
