"""The import graph of src/perflab (every import, at module level or inside a function, read by grimp):
no circle anywhere, layers that go one way, and a puzzle engine that names none of its kinds."""
from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

import perflab

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


def package_back_imports(g, source_of) -> list[str]:
    """`from P import ...` in a module of package P, while P's `__init__` imports that module (at module level or
    inside a function, directly or through others): the package imports itself half-built. grimp records
    `from P import sub` as an import of P.sub alone, so this reads the statements themselves."""
    found = []
    for module in sorted(g.modules):
        tree = ast.parse(source_of(module))
        package = module if source_of.is_package(module) else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            named = node.module or ""
            if node.level:   # relative: `from . import x` names the package this module is in, or one above
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                named = f"{base}.{named}" if named else base
            if named != module and module.startswith(named + ".") and g.find_shortest_chain(importer=named,
                                                                                            imported=module):
                found.append(f"{module}:{node.lineno} imports from {named}, whose __init__ imports {module}")
    return found


class Sources:
    """Each perflab module's source, read from the package's files (nothing is imported)."""
    root = Path(perflab.__file__).resolve().parent

    def _path(self, module: str) -> Path:
        parts = module.split(".")[1:]
        folder = self.root.joinpath(*parts)
        return folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")

    def is_package(self, module: str) -> bool:
        return self._path(module).name == "__init__.py"

    def __call__(self, module: str) -> str:
        return self._path(module).read_text(encoding="utf-8")


def test_no_module_imports_from_its_own_package_while_the_package_imports_it(graph):
    assert package_back_imports(graph, Sources()) == []


def test_a_package_that_imports_itself_back_is_caught():
    g = grimp.ImportGraph()
    for m in ("p", "p.engine", "p.tasks", "p.store"):
        g.add_module(m)
    g.add_import(importer="p", imported="p.engine")   # the __init__ hands on the engine
    g.add_import(importer="p.engine", imported="p.tasks")
    g.add_import(importer="p.tasks", imported="p.store")
    text = {"p": "from p.engine import run\n", "p.engine": "from p.tasks import one\n", "p.store": "",
            "p.tasks": "from p.store import key\n"}

    class Fake:
        def __call__(self, module):
            return text[module]

        def is_package(self, module):
            return module == "p"

    assert package_back_imports(g, Fake()) == []
    text["p.tasks"] = "from p import store\n"       # the task names the package: it runs p's __init__ first
    assert package_back_imports(g, Fake()) == ["p.tasks:1 imports from p, whose __init__ imports p.tasks"]
    text["p.tasks"] = "from . import store\n"
    assert package_back_imports(g, Fake()) == ["p.tasks:1 imports from p, whose __init__ imports p.tasks"]


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
