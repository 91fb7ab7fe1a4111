"""fp8-weight-only and cuda-graph-memory on the CPU: workload, solution and starter load by path and
compute the same outputs on the smoke-size model (the GPU paths, CUDA graphs and the Triton kernel,
run on the device: scripts/record.py puzzle, tests/gpu)."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import shipped_file

torch = pytest.importorskip("torch")

from perflab.puzzles.engine import spec  # noqa: E402
from perflab.puzzles.engine.runner import load_module  # noqa: E402

CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"
FOLDERS = ["40-fp8-weight-only", "41-cuda-graph-memory"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_variants_agree_on_the_cpu(folder):
    outs = []
    for variant in ("workload", "starter", "solution"):
        module = load_module(shipped_file(CATALOG / folder, variant))
        state = module.setup("cpu", 11)
        outs.append(module.step(state).clone())
        torch.testing.assert_close(module.step(state), outs[-1])  # a step is repeatable
    assert outs[0].dtype == torch.bfloat16 and torch.isfinite(outs[0].float()).all()
    for got in outs[1:]:
        torch.testing.assert_close(got, outs[0], rtol=2e-2, atol=2e-2)
    other_seed = load_module(CATALOG / folder / "workload.py")
    assert not torch.equal(other_seed.step(other_seed.setup("cpu", 12)), outs[0])


def test_puzzle_specs():
    fp8 = spec.load(CATALOG / FOLDERS[0] / "puzzle.toml")
    graphs = spec.load(CATALOG / FOLDERS[1] / "puzzle.toml")
    assert (fp8.order, fp8.level, fp8.check.planted, fp8.check.metric) == (400, 3, "dequant-overhead", "time")
    assert (graphs.order, graphs.check.metric, graphs.check.reduction) == (410, "reserved_mb", 3.0)
    assert "memory" in fp8.tools and "memory" in graphs.tools


def test_fp8_weights_are_stored_in_fp8():
    from perflab.workloads import fp8, llama

    model = llama.build(llama.SMOKE, "cpu", 0)
    bf16_bytes = llama.weight_bytes(model)
    llama.swap_linears(model, fp8.make_dequant_linear)
    linear = model.layers[0].wq
    assert linear.weight_fp8.dtype == torch.float8_e4m3fn and linear.scale.shape == (linear.out_features, 1)
    assert llama.weight_bytes(model) < 0.6 * bf16_bytes
    w = linear.weight_fp8.float() * linear.scale.float()
    assert w.abs().amax(dim=1).div(linear.scale.float().squeeze(1)).max() <= fp8.FP8_MAX
