"""One copy of each workload: the starter is derived from workload.py (engine/starter.py), solutions load
what they share from it (perflab.workloads.siblings), and `perflab start` writes both into the workspace."""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from conftest import FAKE_ID, shipped_puzzles

from perflab.puzzles.engine import catalog, spec, workspace
from perflab.puzzles.engine.starter import TITLE, starter_source
from perflab.workloads import siblings

SHIPPED = shipped_puzzles()


def code_and_doc(text: str) -> tuple[str, str]:
    """The module's code without its docstring, and the docstring."""
    tree = ast.parse(text)
    doc = ast.get_docstring(tree, clean=False) or ""
    end = tree.body[0].end_lineno if doc else 0
    return "\n".join(text.split("\n")[end:]), doc


def test_no_shipped_puzzle_keeps_a_second_copy_of_its_workload():
    assert SHIPPED and [p.id for p in SHIPPED if (p.folder / "starter.py").exists()] == []


@pytest.mark.parametrize("puzzle", SHIPPED, ids=lambda p: p.id)
def test_the_starter_is_the_workload_under_its_header(puzzle):
    workload = puzzle.file("slow").read_text(encoding="utf-8")
    starter = starter_source(puzzle)
    assert code_and_doc(starter)[0] == code_and_doc(workload)[0]
    doc, wdoc = code_and_doc(starter)[1], code_and_doc(workload)[1]
    title = puzzle.starter.title or TITLE.format(name=wdoc.split(": ", 1)[0])
    assert doc.startswith(title + "\n") and doc.endswith(wdoc.split("\n", 2)[2])
    assert puzzle.starter.header.strip() in doc
    assert puzzle.file("starter").read_text(encoding="utf-8") == starter


def test_start_writes_the_starter_and_the_workload_beside_it(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("PERFLAB_WORK", str(tmp_path / "work"))
    monkeypatch.setenv("PERFLAB_SMOKE", "1")
    puzzle = catalog.get("launch-overhead")
    fix, created = workspace.start(puzzle)
    assert created and fix.read_text() == starter_source(puzzle)
    beside = fix.with_name("workload.py")
    assert beside.read_text() == puzzle.file("slow").read_text()
    fix.write_text("# mine\n")
    assert workspace.start(puzzle) == (fix, False) and fix.read_text() == "# mine\n"
    fix.write_text(starter_source(puzzle))  # the starter runs on its own, outside the catalog
    from perflab.puzzles.engine.runner import load_module

    mine, slow = load_module(fix), load_module(puzzle.file("slow"))
    torch.testing.assert_close(mine.step(mine.setup("cpu", 3)), slow.step(slow.setup("cpu", 3)))


def test_a_folder_with_its_own_starter_keeps_it(fake_catalog):
    puzzle = catalog.get(FAKE_ID)
    assert puzzle.file("starter") == puzzle.folder / "starter.py"
    (puzzle.folder / "starter.py").unlink()
    derived = spec.load(puzzle.source).file("starter")
    assert derived.parent != puzzle.folder and derived.read_text() == starter_source(puzzle)


def test_the_starter_table_is_validated(fake_catalog):
    puzzle = catalog.get(FAKE_ID)
    text = puzzle.source.read_text()
    puzzle.source.write_text(text + '\n[starter]\nheadline = "x"\n')
    with pytest.raises(spec.SpecError, match=r"field 'starter.headline' is not a known field"):
        spec.load(puzzle.source)
    puzzle.source.write_text(text + "\n[starter]\nheader = '''\nWhat to do: make it fast.\n'''\n")
    (puzzle.folder / "starter.py").unlink()
    assert "\nWhat to do: make it fast.\n" in spec.load(puzzle.source).file("starter").read_text()


def test_siblings_load_the_file_beside_else_the_catalogs(tmp_path):
    here = tmp_path / "fix.py"
    assert siblings.path(here, "01-launch-overhead") == siblings.CATALOG / "01-launch-overhead" / "workload.py"
    (tmp_path / "workload.py").write_text(textwrap.dedent("""\
        SIZE = {"mine": 1}
    """))
    assert siblings.load(here, "01-launch-overhead").SIZE == {"mine": 1}
    assert siblings.path(None, "01-launch-overhead") == siblings.CATALOG / "01-launch-overhead" / "workload.py"
    assert Path(siblings.load(None, "01-launch-overhead").__file__).parent.name == "01-launch-overhead"
