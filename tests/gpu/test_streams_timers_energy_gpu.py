"""The streams / timers / energy puzzles' GPU pieces on a real GPU (run on the device:
python3 -m pytest -m gpu tests/gpu/test_streams_timers_energy_gpu.py).

The per-expert Triton GEMM against torch (one expert per launch and all experts in one launch), the
part timers (a host clock without synchronize under-reports a GEMM; events and synchronized clocks
agree), and the energy recorder's NVML data.
"""
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from perflab.puzzles.evidence import energy as energy_evidence, timers as timers_evidence  # noqa: E402
from perflab.workloads.expert_gemm import _torch_reference, blocks, expert_gemm  # noqa: E402


@pytest.mark.parametrize("gelu", [False, True])
def test_expert_gemm_matches_torch_per_expert_and_batched(gelu):
    pytest.importorskip("triton")
    e, t, k, n = 5, 200, 640, 520                      # partial tiles in every dimension
    x = torch.randn(e, t, k, device="cuda").to(torch.bfloat16)
    w = (torch.randn(e, n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
    ref = _torch_reference(x, w, gelu).to(torch.bfloat16)
    one = torch.full((e, t, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    for i in range(e):
        expert_gemm(x, w, one, first=i, gelu=gelu)
    batched = torch.full_like(one, float("nan"))
    expert_gemm(x, w, batched, experts=e, gelu=gelu)
    torch.testing.assert_close(one, ref, rtol=2e-2, atol=2e-2)
    assert torch.equal(one, batched)
    assert blocks(128, 4096) == 16


def test_host_timer_without_sync_under_reports_a_gemm():
    a = torch.randn(4096, 4096, device="cuda")

    def gemm(state):
        state["c"] = a @ a                             # fp32: milliseconds on the GPU

    def read(state):
        state["v"] = state["c"][0, 0].item()           # waits for the GEMM

    data = timers_evidence.measure([("gemm", gemm), ("read", read)], {}, "cuda", steps=5, warmup=2)
    m = {k: {p: v["median_ms"] for p, v in data["methods"][k]["parts"].items()} for k in data["methods"]}
    assert set(m) == {"host", "host_sync", "events"}
    assert m["events"]["gemm"] > 0.5 and m["host"]["gemm"] < 0.3 * m["events"]["gemm"]
    assert m["host"]["read"] > 0.5 * m["events"]["gemm"]          # the .item() absorbs the GEMM
    assert m["host_sync"]["gemm"] == pytest.approx(m["events"]["gemm"], rel=0.5)


def test_energy_recording_has_the_nvml_samples():
    pytest.importorskip("pynvml")

    class Module:
        @staticmethod
        def step(state):
            return state["a"] @ state["a"]

    state = {"a": torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)}
    data = energy_evidence.measure(Module, state, min_time_s=0.5, interval_s=0.02, items_per_call=4096)
    e = data["energy"]
    assert e["joules_per_call"] > 0 and e["flops_per_call"] == pytest.approx(2 * 4096 ** 3, rel=1e-6)
    assert data["joules_per_item"] == pytest.approx(e["joules_per_call"] / 4096)
    assert 50 < e["mean_power_w"] < 1000 and data["gflop_per_joule"] > 10
    samples = data["monitor"]["samples"]
    assert len(samples) >= 10 and all(s["power_w"] is not None for s in samples)
