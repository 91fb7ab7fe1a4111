"""How the engine finds what it never names: the modules of the evidence and questions packages, imported
once each by discovery, register themselves (evidence kinds in engine/kinds.py, question analyses here)."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable

QUESTIONS = "perflab.puzzles.questions"

ANALYSES: dict[str, Callable[..., Any]] = {}   # question analyses by name (perflab.puzzles.questions.registry)
_discovered: set[str] = set()


def discover(package: str) -> None:
    """Import every module of `package` once (each registers what it defines on import)."""
    if package in _discovered:
        return
    _discovered.add(package)
    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{package}.{info.name}")


def analyses() -> dict[str, Callable[..., Any]]:
    """Every question analysis by name."""
    discover(QUESTIONS)
    return ANALYSES
