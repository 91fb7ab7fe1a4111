"""speed-of-light (catalog 64): GEMM FLOPs from recorded shapes (analysis/work/matmul_work.py), the
gemm_speed_of_light analysis against measured ceilings (puzzles/questions/speed.py) on a real H100 trace of
busy bf16 GEMMs, the puzzle's contract, and its workloads on the CPU. The GPU recording is replayed by
test_puzzle_catalog.py once it is shipped; the story it must tell is checked here (skipped until then).
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import shutil
from pathlib import Path

import pytest
from conftest import shipped_file

from perflab.errors import PerflabError
from perflab.puzzles.engine import catalog, replay

from perflab.puzzles import questions
ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "src" / "perflab" / "catalog" / "64-speed-of-light"
HEALTHY = ROOT / "tests" / "data" / "kineto" / "h100_healthy_gemm.trace.json.gz"  # scripts/record.py healthy-gemm
CEILINGS = ROOT / "tests" / "data" / "ncu" / "ceilings_h100_full.json"             # perflab bench, same H100
FLOP_8192 = 2.0 * 8192 ** 3
_ids = itertools.count()


def evidence(tmp_path: Path, ceilings: dict | None = None) -> replay.Evidence:
    """A recording folder whose solution trace is the real H100 trace of 8 bf16 8192^3 GEMMs per step."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HEALTHY, replay.trace_file(tmp_path, "solution"))
    if ceilings is None:
        shutil.copyfile(CEILINGS, tmp_path / "ceilings.json")
    else:
        (tmp_path / "ceilings.json").write_text(json.dumps(ceilings))
    return replay.Evidence(tmp_path, "speed-of-light")


def sol(ev, field: str, **args):
    return questions.ANALYSES["gemm_speed_of_light"](ev, field=field, **args)


# --- FLOPs from shapes --------------------------------------------------------------------------------

def test_op_flops_from_input_dims():
    from perflab.analysis.work.matmul_work import op_flops

    assert op_flops("aten::mm", [[64, 128], [128, 32]]) == 2 * 64 * 128 * 32
    assert op_flops("aten::addmm", [[32], [64, 128], [128, 32], [], []]) == 2 * 64 * 128 * 32
    assert op_flops("aten::bmm", [[4, 64, 128], [4, 128, 32]]) == 2 * 4 * 64 * 128 * 32
    assert op_flops("aten::baddbmm", [[4, 64, 32], [4, 64, 128], [4, 128, 32], [], []]) == 2 * 4 * 64 * 128 * 32
    assert op_flops("aten::linear", [[8, 64, 128], [32, 128], [32]]) == 2 * 8 * 64 * 128 * 32
    assert op_flops("aten::matmul", [[8, 64, 128], [128, 32]]) == 2 * 8 * 64 * 128 * 32
    assert op_flops("aten::mm", [[64, 128], [127, 32]]) is None      # inner sizes disagree
    assert op_flops("aten::add", [[64, 128], [64, 128]]) is None      # not a matmul
    assert op_flops("aten::addmm", [[32], [64, 128], []]) is None     # a shape missing


def test_gemm_work_on_the_real_h100_trace():
    from perflab.analysis.work.matmul_work import gemm_work
    from perflab.analysis.steps.windows import analysis_windows
    from perflab.trace.kineto import load

    trace = load(HEALTHY)
    windows = analysis_windows(trace)
    work = gemm_work(trace, windows)
    assert len(windows.steps) == 6 and work["ops"] == 48 and work["kernels"] == 48   # 8 aten::mm per step
    assert work["flops"] == 48 * FLOP_8192 and list(work["by_path"]) == ["bf16"]
    assert work["shapes"][0]["dims"] == "[[8192, 8192], [8192, 8192]]" and work["shapes"][0]["count"] == 48
    # the host runs ahead, so the steps are read on the GPU's clock: the kernels of the step before the first
    # recorded one (launched before the trace began: no op, no FLOPs) ran before the windows, not in them
    assert "GPU's clock" in windows.found_by
    assert work["unattributed_kernels"] == 0 and work["gemm_us"] > 0


# --- gemm_speed_of_light against the measured ceiling --------------------------------------------------

def test_speed_of_light_of_busy_bf16_gemms(tmp_path):
    ev = evidence(tmp_path)
    ceiling = json.loads(CEILINGS.read_text())["results"]["matmul_bf16"]["value"]
    assert sol(ev, "ceiling_tflops").value == pytest.approx(ceiling, abs=1e-3)
    assert sol(ev, "gflop_per_step").value == pytest.approx(8 * FLOP_8192 / 1e9, rel=1e-6)
    tflops = sol(ev, "tflops")
    # the same 8192^3 bf16 matmul that perflab bench measured: at the ceiling, within the bench's spread
    assert 700 < tflops.value < 800
    assert sol(ev, "pct_of_ceiling").value == pytest.approx(100 * tflops.value / ceiling, rel=1e-3)
    assert 95 < sol(ev, "pct_of_ceiling").value < 105
    step = sol(ev, "step_pct_of_ceiling").value      # the scale kernel after every GEMM takes the rest
    assert 80 < step < sol(ev, "pct_of_ceiling").value
    headroom = sol(ev, "headroom_pct")
    assert 0 <= headroom.value < 3
    assert headroom.evidence["GEMM ops per step"] == 8 and "matmul_bf16" in headroom.evidence["ceiling"]
    assert sol(ev, "tflops", path="bf16").value == tflops.value


def test_graded_like_any_number(tmp_path):
    ev = evidence(tmp_path)
    p = catalog.find(catalog.load_catalog([catalog.BUILTIN]), "speed-of-light")
    q = p.find_question("pct_of_ceiling")
    computed = questions.compute(q, ev)
    assert questions.grade(q, f"{computed.value:.0f}%", computed).correct
    assert not questions.grade(q, "50", computed).correct


def test_refuses_a_ceiling_of_another_gpu_or_the_datasheet(tmp_path):
    data = json.loads(CEILINGS.read_text())
    other = {**data, "manifest": {**data["manifest"], "gpu": "NVIDIA H200"}}
    with pytest.raises(PerflabError, match="measured on NVIDIA H200.*recorded on NVIDIA H100"):
        sol(evidence(tmp_path / "a", other), "tflops")
    no_bf16 = {**data, "results": {k: v for k, v in data["results"].items() if k != "matmul_bf16"}}
    with pytest.raises(PerflabError, match="no measured bf16 matmul ceiling"):
        sol(evidence(tmp_path / "b", no_bf16), "tflops")
    ev = evidence(tmp_path / "c")
    (tmp_path / "c" / "ceilings.json").unlink()
    with pytest.raises(PerflabError, match="no measured ceilings"):
        sol(ev, "tflops")
    with pytest.raises(PerflabError, match="not one of"):
        sol(ev, "speed")
    with pytest.raises(PerflabError, match="no fp8 matrix multiply"):
        sol(evidence(tmp_path / "c"), "tflops", path="fp8")


# --- the puzzle ------------------------------------------------------------------------------------------

def test_puzzle_contract():
    p = catalog.find(catalog.load_catalog([catalog.BUILTIN]), "speed-of-light")
    assert p.folder == FOLDER and p.level == 4 and p.order == 640
    assert p.taxonomy[0] == "healthy" and p.check.planted == "launch-overhead" in p.taxonomy
    assert set(p.prerequisites) == {"roofline-practice", "batch-size-knee"} and p.seeds and len(p.hints) >= 3
    assert p.check.speedup >= 1.5 and p.profile.steps >= 2
    by_key = {q.key: q for q in p.questions}
    assert by_key["verdict"].analysis == "doctor_top_id" and by_key["verdict"].args == {"variant": "solution"}
    assert {q.analysis for q in p.questions} >= {"doctor_top_id", "gpu_busy_pct", "gemm_speed_of_light", "speedup"}
    # the ceilings the questions grade against ship with the puzzle (measured on the recording's H100)
    assert json.loads((p.artifacts / "ceilings.json").read_text()) == json.loads(CEILINGS.read_text())


def load(variant: str):
    spec = importlib.util.spec_from_file_location(f"speed_of_light_{next(_ids)}_{variant}", shipped_file(FOLDER, variant))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_workloads_on_the_cpu_agree_and_the_solution_batches(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    slow, fix, starter = load("workload"), load("solution"), load("starter")
    want = slow.step(slow.setup("cpu", 7))
    size = slow.SMOKE_SIZE
    assert want.dtype == torch.bfloat16 and want.shape == (size["requests"], size["rows"], size["dim"])
    torch.testing.assert_close(fix.step(fix.setup("cpu", 7)), want, rtol=2e-2, atol=1e-2)
    assert torch.equal(starter.step(starter.setup("cpu", 7)), want)
    assert not torch.equal(slow.step(slow.setup("cpu", 8)), want)

    def addmm_flops(module) -> list[float]:
        """FLOPs of each aten::addmm one step runs, from the shapes torch.profiler records."""
        from perflab.analysis.work.matmul_work import op_flops

        state = module.setup("cpu", 7)
        path = tmp_path / f"{module.__name__}.json"
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            module.step(state)
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
        return [op_flops(e["name"], e["args"]["Input Dims"]) for e in events if e.get("name") == "aten::addmm"]

    slow_ops, fix_ops = addmm_flops(slow), addmm_flops(fix)
    assert len(slow_ops) == 2 * size["requests"] and len(fix_ops) == 2      # one batch: two GEMMs
    assert sum(slow_ops) == sum(fix_ops) == slow.gemm_flop_per_step(size)


# --- the recording (replayed once shipped) -------------------------------------------------------------

@pytest.mark.skipif(not replay.trace_file(FOLDER / "artifacts", "slow").is_file(),
                    reason="speed-of-light is not recorded yet (scripts/record.py puzzle on the GPU)")
def test_the_recording_tells_the_story():
    p = catalog.find(catalog.load_catalog([catalog.BUILTIN]), "speed-of-light")
    ev = replay.recording(p)
    assert ev.report("slow").findings[0].id == "launch-overhead"
    fixed = ev.report("solution")
    assert fixed.findings[0].id == "healthy", [(f.id, f.severity, f.gain_pct) for f in fixed.findings]
    assert all(f.severity in ("info", "low") for f in fixed.findings)  # the H100 recording: a low gpu-idle note
    assert ev.summary("solution")["gpu_busy_pct"] > 90
    assert sol(ev, "pct_of_ceiling").value > 80 and sol(ev, "headroom_pct").value < 10
    assert sol(ev, "step_pct_of_ceiling", variant="slow").value < 25
