"""Question kinds: one registry of named analyses (registry.py), one module per kind of evidence they read.

Each module registers its analyses with `@registry.analysis` when it is imported; this package imports
every module beside it once, by discovery (none by name), so `ANALYSES` holds them all. The numbers
come from perflab.analysis and the doctor; a question module picks the value a question asks for and
the evidence shown with it.
"""
from __future__ import annotations

from perflab.puzzles.engine.plugins import discover
from perflab.puzzles.questions.registry import ANALYSES, Computed, Grade, analysis, compute, grade, normalize

__all__ = ["ANALYSES", "Computed", "Grade", "analysis", "compute", "grade", "normalize"]

discover(__name__)
