"""The import graph of src/perflab (every import, at module level or inside a function, read by grimp):
no circle anywhere, layers that go one way, and a puzzle engine that names none of its kinds."""
from __future__ import annotations

import grimp
import pytest

# Lowest last: a layer may import the layers below it, never one above. The middle row is one layer.
LAYERS = (
    ("perflab.cli", "perflab.__main__"),
    ("perflab.report", "perflab.puzzles", "perflab.toolkit", "perflab.multirank"),
    ("perflab.doctor",),
    ("perflab.analysis",),
    ("perflab.trace",),
)
BASE = ("perflab.errors", "perflab.paths", "perflab.code_stamp", "perflab.outputs", "perflab.history", "perflab.process_group",
        "perflab.workloads")   # below every layer


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


def layer_of(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if any(module == top or module.startswith(top + ".") for top in layer):
            return i
    if any(module == top or module.startswith(top + ".") for top in BASE):
        return len(LAYERS)
    return -1   # perflab itself (the version): anyone may import it


def upward_imports(g) -> list[str]:
    out = []
    for importer in sorted(g.modules):
        for imported in sorted(g.find_modules_directly_imported_by(importer)):
            a, b = layer_of(importer), layer_of(imported)
            if b >= 0 and a > b or (a == len(LAYERS) and b >= 0 and b < a):
                out.append(f"{importer} -> {imported}")
    return out


def test_every_module_has_a_layer(graph):
    assert [m for m in sorted(graph.modules) if layer_of(m) < 0 and m != "perflab"] == []


def test_layers_go_one_way(graph):
    assert upward_imports(graph) == []


def test_an_upward_import_is_caught(graph):
    g = grimp.ImportGraph()
    for m in ("perflab", "perflab.trace", "perflab.trace.x", "perflab.toolkit", "perflab.toolkit.y"):
        g.add_module(m)
    g.add_import(importer="perflab.toolkit.y", imported="perflab.trace.x")
    assert upward_imports(g) == []
    g.add_import(importer="perflab.trace.x", imported="perflab.toolkit.y")
    assert upward_imports(g) == ["perflab.trace.x -> perflab.toolkit.y"]


def test_the_puzzle_engine_names_no_evidence_or_question_kind(graph):
    """The engine finds kinds by discovery (engine/plugins.py); the kinds import the engine, never back."""
    engine = graph.find_descendants("perflab.puzzles.engine") | {"perflab.puzzles.engine"}
    named = [f"{m} -> {i}" for m in sorted(engine) for i in sorted(graph.find_modules_directly_imported_by(m))
             if i.startswith(("perflab.puzzles.evidence", "perflab.puzzles.questions"))]
    assert named == []


def test_the_analyses_and_the_doctor_serve_the_puzzles_without_knowing_them(graph):
    below = [m for m in graph.modules if layer_of(m) in (2, 3, 4)]
    assert not [m for m in below if graph.chain_exists(importer=m, imported="perflab.puzzles", as_packages=True)]


def test_every_kind_registers_itself():
    from perflab.puzzles.engine import kinds
    from perflab.puzzles.engine.plugins import analyses

    names = set(kinds.registered())
    assert {"trace", "ncu", "memory", "overhead", "timers", "energy", "autotune", "multi-rank"} <= names
    assert {"doctor_top_id", "ncu_top_id", "memory_field", "straggler_rank"} <= set(analyses())
