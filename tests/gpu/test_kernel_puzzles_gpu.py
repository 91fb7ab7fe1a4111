"""The kernel puzzles' CUDA kernels on a real GPU (python3 -m pytest -m gpu tests/gpu):
the slow kernel computes what its torch reference says, and slow, starter and solution agree.
"""
import importlib.util
import itertools

import pytest
from conftest import shipped_puzzles

from perflab.puzzles.checker import tolerance

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PUZZLES = [p for p in shipped_puzzles() if "ncu" in p.tools]
_ids = itertools.count()


def load(path):
    spec = importlib.util.spec_from_file_location(f"kernel_puzzle_{next(_ids)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("puzzle", PUZZLES, ids=[p.id for p in PUZZLES])
def test_kernels_match_the_reference_and_each_other(puzzle):
    slow = load(puzzle.file("slow"))
    state = slow.setup("cuda", 11)
    out = slow.step(state).clone()
    torch.cuda.synchronize()
    rtol, atol = tolerance(str(out.dtype).removeprefix("torch."), puzzle)
    if hasattr(slow, "reference_state"):
        torch.testing.assert_close(out, slow.reference_state(state).to(out.dtype), rtol=max(rtol, 1e-4),
                                   atol=max(atol, 1e-3))
    elif hasattr(slow, "reference"):
        ref = slow.reference(state.get("x", state.get("expert")))
        torch.testing.assert_close(out, ref.to(out.dtype), rtol=1e-4, atol=1e-3)
    for variant in ("starter", "solution"):
        mod = load(puzzle.file(variant))
        got = mod.step(mod.setup("cuda", 11)).clone()
        torch.cuda.synchronize()
        torch.testing.assert_close(got, out, rtol=max(rtol, 1e-5), atol=max(atol, 1e-5))
