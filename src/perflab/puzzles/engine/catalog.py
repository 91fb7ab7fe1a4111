"""The catalog: every perflab/catalog/*/puzzle.toml plus the folders in PERFLAB_CATALOG, in curriculum order."""
from __future__ import annotations

import difflib
import os
from pathlib import Path

from perflab.errors import PerflabError
from perflab.puzzles.engine import spec
from perflab.puzzles.engine.spec import Puzzle, SpecError, display_path

BUILTIN = Path(__file__).resolve().parents[2] / "catalog"


def catalog_roots() -> list[Path]:
    """The shipped catalog, then each folder named in PERFLAB_CATALOG (os.pathsep-separated)."""
    extra = [Path(p) for p in os.environ.get("PERFLAB_CATALOG", "").split(os.pathsep) if p]
    return [BUILTIN, *extra]


def spec_files(roots: list[Path]) -> list[Path]:
    files: list[Path] = []
    for root in roots:
        if (root / "puzzle.toml").is_file():  # a root may be one puzzle folder
            files.append(root / "puzzle.toml")
        elif root.is_dir():
            files.extend(sorted(root.glob("*/puzzle.toml")))
    return files


def load_catalog(roots: list[Path] | None = None) -> list[Puzzle]:
    """All puzzles, validated together (unique ids, known prerequisites), sorted by `order` then id."""
    puzzles = [spec.load(p) for p in spec_files(catalog_roots() if roots is None else roots)]
    seen: dict[str, Puzzle] = {}
    for p in puzzles:
        if p.id in seen:
            raise SpecError(f"{display_path(p.source)}: field 'id' {p.id!r} is already used by "
                            f"{display_path(seen[p.id].source)}")
        seen[p.id] = p
    for p in puzzles:
        for i, pre in enumerate(p.prerequisites):
            if pre not in seen:
                raise SpecError(f"{display_path(p.source)}: field 'prerequisites[{i}]' names no puzzle ({pre!r})")
    return sorted(puzzles, key=lambda p: (p.order, p.id))


def find(puzzles: list[Puzzle], ref: str) -> Puzzle:
    """A puzzle by id, by folder name (01-launch-overhead) or by its folder number (1, 01)."""
    for p in puzzles:
        if ref in (p.id, p.folder.name):
            return p
    if ref.isdigit():
        for p in puzzles:
            prefix = p.folder.name.split("-", 1)[0]
            if prefix.isdigit() and int(prefix) == int(ref):
                return p
    close = difflib.get_close_matches(ref, [p.id for p in puzzles], n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise PerflabError(f"no puzzle {ref!r}: {hint}`perflab list` shows the catalog")


def get(ref: str) -> Puzzle:
    return find(load_catalog(), ref)


def with_tag(puzzles: list[Puzzle], tag: str) -> list[Puzzle]:
    from perflab.doctor.finding import TAXONOMY_IDS

    if tag not in TAXONOMY_IDS:
        raise PerflabError(f"{tag!r} is not a taxonomy id, e.g. host-sync, launch-overhead (perflab taxonomy lists them)")
    return [p for p in puzzles if tag in p.taxonomy]
