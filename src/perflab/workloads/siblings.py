"""A puzzle file that builds on another one: a solution on its workload, a workload on another puzzle's.

`load(here, folder)` imports `name` (default workload.py) from beside the file that asks, `here` (its
catalog folder, or a learner's workspace, where `perflab start` copies workload.py beside fix.py), else
from the shipped catalog's `folder`; `here=None` reads the catalog's alone.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

CATALOG = Path(__file__).resolve().parents[1] / "catalog"


def path(here: str | Path | None, folder: str, name: str = "workload.py") -> Path:
    beside = Path(here).with_name(name) if here else None
    return beside if beside is not None and beside.is_file() else CATALOG / folder / name


def load(here: str | Path | None, folder: str, name: str = "workload.py") -> ModuleType:
    source = path(here, folder, name)
    spec = importlib.util.spec_from_file_location(f"_{folder.replace('-', '_')}_{source.stem}", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
