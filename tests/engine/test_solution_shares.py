"""A solution that imports functions from its workload must not redefine a global those functions read:
the imported function reads the workload's value, not the solution's (tile-quantization's solution once named
its 48 x 48 kernel after the workload's 128 x 128 tile, and the doctor believed the name)."""
import types

import pytest

from perflab.puzzles.engine import catalog, runner

PUZZLES = [p for p in catalog.load_catalog([catalog.BUILTIN])]


def _names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def _same(a, b) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:
        return False


def shadowed(solution: types.ModuleType) -> list[str]:
    """'fn reads NAME' for each function the solution took from another module whose globals hold NAME with a
    value other than the solution's own NAME."""
    own = vars(solution)
    found = []
    for attr, fn in own.items():
        if not isinstance(fn, types.FunctionType) or fn.__globals__ is own:
            continue
        theirs = fn.__globals__
        for name in sorted(n for n in _names(fn.__code__) if not n.startswith("__")):
            if name in own and name in theirs and not _same(own[name], theirs[name]) \
                    and not isinstance(own[name], (types.ModuleType, types.FunctionType, type)):
                found.append(f"{attr} reads {name} (the workload's {theirs[name]!r}, the solution's {own[name]!r})")
    return found


@pytest.mark.parametrize("puzzle", PUZZLES, ids=[p.id for p in PUZZLES])
def test_functions_a_solution_shares_read_the_values_it_runs_with(puzzle):
    path = puzzle.folder / "solution.py"
    if not path.is_file():
        pytest.skip("no solution.py")
    try:
        module = runner.load_module(path)
    except Exception as exc:  # a solution that needs the GPU's packages to import
        pytest.skip(f"does not import here: {exc}")
    assert shadowed(module) == []


def test_the_check_finds_a_shadowed_global():
    work = types.ModuleType("w")
    exec("TILE = 128\ndef name():\n    return f'tile{TILE}'", vars(work))
    sol = types.ModuleType("s")
    sol.TILE, sol.name = 48, work.name
    assert shadowed(sol) == ["name reads TILE (the workload's 128, the solution's 48)"]
