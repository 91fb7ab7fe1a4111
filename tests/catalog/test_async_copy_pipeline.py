"""async-copy-pipeline (catalog 67): without Triton or CUDA, the workload, the solution and the starter derived
from the workload take their torch path at SMOKE_SIZE and return C = A @ B (fp32 accumulation, bf16 out), so
the files run and check anywhere. The kernels themselves run on the GPU machine (scripts/record.py puzzle)."""
from __future__ import annotations

import pytest

from perflab.puzzles.engine import catalog, runner

from conftest import assert_inputs_follow_the_seed

torch = pytest.importorskip("torch")
PUZZLE = next(p for p in catalog.load_catalog([catalog.BUILTIN]) if p.id == "async-copy-pipeline")


@pytest.mark.parametrize("variant", ["slow", "solution", "starter"])
def test_every_variant_computes_the_product_on_the_cpu(variant):
    module = runner.load_module(PUZZLE.file(variant))
    state = module.setup("cpu", 11)
    state["out"].fill_(float("nan"))
    got = module.step(state)
    size = module.SMOKE_SIZE
    assert state["a"].shape == (size["m"], size["k"]) and state["b"].shape == (size["k"], size["n"])
    expected = (state["a"].double() @ state["b"].double()).to(torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.shape == (size["m"], size["n"])
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=1e-2)


def test_the_inputs_come_from_the_seed():
    assert_inputs_follow_the_seed(runner.load_module(PUZZLE.file("slow")))
