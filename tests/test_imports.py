"""The import graph of src/perflab (every import, at module level or inside a function, read by grimp):
no circle anywhere, and a puzzle engine that names none of its kinds."""
from __future__ import annotations

import grimp
import pytest

@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("perflab", include_external_packages=False)


def circles(g) -> list[list[str]]:
    """One shortest circle through each import that closes one (importer -> imported -> ... -> importer)."""
    found, seen = [], set()
    for importer in sorted(g.modules):
        for imported in sorted(g.find_modules_directly_imported_by(importer)):
            back = g.find_shortest_chain(importer=imported, imported=importer)
            if back and frozenset(back) not in seen:
                seen.add(frozenset(back))
                found.append([importer, *back])
    return found


def test_no_import_circle_anywhere(graph):
    assert circles(graph) == []


def test_the_circle_finder_finds_one():
    g = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        g.add_module(m)
    g.add_import(importer="p.a", imported="p.b")
    g.add_import(importer="p.b", imported="p.c")
    assert circles(g) == []
    g.add_import(importer="p.c", imported="p.a")
    assert circles(g) == [["p.a", "p.b", "p.c", "p.a"]]


def test_the_puzzle_engine_names_no_evidence_or_question_kind(graph):
    """The engine finds kinds by discovery (engine/plugins.py); the kinds import the engine, never back."""
    engine = graph.find_descendants("perflab.puzzles.engine") | {"perflab.puzzles.engine"}
    named = [f"{m} -> {i}" for m in sorted(engine) for i in sorted(graph.find_modules_directly_imported_by(m))
             if i.startswith(("perflab.puzzles.evidence", "perflab.puzzles.questions"))]
    assert named == []


def test_every_kind_registers_itself():
    from perflab.puzzles.engine import kinds
    from perflab.puzzles.engine.plugins import analyses

    names = set(kinds.registered())
    assert {"trace", "ncu", "memory", "overhead", "timers", "energy", "autotune", "multi-rank"} <= names
    assert {"doctor_top_id", "ncu_top_id", "memory_field", "straggler_rank"} <= set(analyses())
