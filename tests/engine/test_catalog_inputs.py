"""Issue 27: every catalog workload decides which of its state entries the fix checker refills before each timed
repetition (INPUTS, puzzles/engine/guard.py), and on the CPU those refills reach the step and keep the solution
correct."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from perflab.puzzles.engine import checker, guard, runner
from perflab.puzzles.engine.catalog import load_catalog

CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"
WORKLOADS = sorted(CATALOG.glob("*/workload.py"))


def declared_inputs(source: str) -> tuple[ast.AST | None, int]:
    """The module-level `INPUTS = ...` value and its line (None, 0 when the workload declares none)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "INPUTS" for t in node.targets):
            return node.value, node.lineno
    return None, 0


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: p.parent.name)
def test_every_workload_declares_its_inputs_or_says_why_it_has_none(path):
    source = path.read_text(encoding="utf-8")
    value, line = declared_inputs(source)
    assert value is not None, f"{path.parent.name}: declare INPUTS (the step's input entries) or INPUTS = () with why"
    if isinstance(value, ast.Tuple) and not value.elts:
        above = source.splitlines()[max(0, line - 4):line]
        assert any("#" in text for text in above), f"{path.parent.name}: INPUTS = () needs a comment saying why"


def test_the_declaration_check_can_fail():
    assert declared_inputs("SIZE = 1\n")[0] is None
    value, line = declared_inputs("# none: x is a weight\nINPUTS = ()\n")
    assert isinstance(value, ast.Tuple) and not value.elts and line == 2


def _runs_on_cpu(puzzle):
    try:
        module = runner.load_module(puzzle.file("slow"))
        module.setup("cpu", 1)
    except Exception as exc:  # CuPy, Triton or CUDA-only puzzles: their refills run in the GPU catalog check
        pytest.skip(f"{puzzle.id} does not run on the CPU: {type(exc).__name__}")
    return module


def _identical(a, b) -> bool:
    import torch

    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for (_, x), (_, y) in zip(a, b))


@pytest.mark.parametrize("puzzle", load_catalog(), ids=lambda p: p.folder.name)
def test_refills_reach_the_step_and_keep_the_solution_correct(puzzle):
    ref = _runs_on_cpu(puzzle)
    fix = runner.load_module(puzzle.file("solution"))
    ref_state, fix_state = ref.setup("cpu", 3), fix.setup("cpu", 3)
    keys = guard.input_keys(ref, ref_state)
    assert keys == list(getattr(ref, "INPUTS", ())), "every declared input is an entry of the workload's state"
    assert all(k in fix_state for k in keys), "every declared input is an entry of the solution's state"
    if keys:   # the refill reaches the step: the same state, refilled, gives another output
        before = checker.snapshot(ref.step(ref.setup("cpu", 3)))
        probe = ref.setup("cpu", 3)
        guard.refill(ref, probe, keys, 17, "cpu")
        assert not _identical(before, checker.snapshot(ref.step(probe)))
    timed = guard.time_guarded(ref, ref_state, fix, fix_state, "cpu", 2, puzzle, seed=5)
    assert timed.mismatch == ""
