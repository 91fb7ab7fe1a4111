"""The kernel puzzles' CUDA kernels on a real GPU (python3 -m pytest -m gpu tests/gpu):
the slow kernel computes what its torch reference says, and slow, starter and solution agree.
"""
import importlib.util
import itertools

import pytest
from conftest import shipped_puzzles

from perflab.puzzles.engine.checker import flatten, tolerance

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
    outs = tensors(slow.step(state))  # one tensor, or several (a tuple: the roofline puzzle's step)
    torch.cuda.synchronize()
    if hasattr(slow, "reference_state"):
        refs = tensors(slow.reference_state(state))
    elif hasattr(slow, "reference"):
        refs = tensors(slow.reference(state.get("x", state.get("expert"))))
    else:
        refs = None
    for i, out in enumerate(outs):
        rtol, atol = tolerance(str(out.dtype).removeprefix("torch."), puzzle)
        if refs is not None:
            torch.testing.assert_close(out, refs[i].to(out.dtype), rtol=max(rtol, 1e-4), atol=max(atol, 1e-3))
    for variant in ("starter", "solution"):
        mod = load(puzzle.file(variant))
        got = tensors(mod.step(mod.setup("cuda", 11)))
        torch.cuda.synchronize()
        assert len(got) == len(outs), variant
        for g, out in zip(got, outs):
            rtol, atol = tolerance(str(out.dtype).removeprefix("torch."), puzzle)
            torch.testing.assert_close(g, out, rtol=max(rtol, 1e-5), atol=max(atol, 1e-5))


def tensors(out):
    """A step's output(s) as a list of detached copies (steps may return a tensor or a tuple of them)."""
    return [v.detach().clone() for _, v in flatten(out)]


def _variant(pid: str, variant: str):
    return load(next(p for p in PUZZLES if p.id == pid).file(variant))


def test_occupancy_tail_and_tile_puzzles_plant_what_they_say():
    """57-59 on this GPU (kernels compiled by NVRTC here): the 48 KB shared buffer that caps the blocks per
    SM, one block per SM by registers and a grid of SMs + 1, and the 144-row matrices padded to 128-tiles."""
    low, low_fix = _variant("low-occupancy", "slow"), _variant("low-occupancy", "solution")
    assert low.setup("cuda", 1)["kernel"].attributes["shared_size_bytes"] == 48 * 1024
    assert low_fix.setup("cuda", 1)["kernel"].attributes["shared_size_bytes"] <= 1024
    tail = _variant("tail-effect", "slow")
    state = tail.setup("cuda", 1)
    tail.step(state)
    torch.cuda.synchronize()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert state["chunks"] == sms + 1 and state["n"] == (sms + 1) * tail.CHUNK
    regs = state["kernel"].attributes["num_regs"]
    assert 32 < regs and regs * tail.THREADS <= 65536  # more than half the register file: one block per SM
    tile, tile_fix = _variant("tile-quantization", "slow"), _variant("tile-quantization", "solution")
    state = tile.setup("cuda", 1)
    assert (state["mp"], state["np"]) == (256, 256) and state["kernel"].name == "gemm_bf16_mma_tile128x128"
    del state
    fixed = tile_fix.setup("cuda", 1)
    assert (fixed["mp"], fixed["np"]) == (144, 144) and fixed["kernel"].name == "gemm_bf16_mma_tile48x48"
