"""`perflab profile` and `perflab investigate` on compiled and graphed programs, on the GPU (scripts/record.py stack-checks).

examples/stacks/compiled_block.py (a compiled function in default mode, a compiled module with reduce-overhead
and with max-autotune) and examples/stacks/graphed_decode.py (CUDA graph replays, no nn.Module call in the loop):
the program exits 0, the trace holds kernels, the recorded steps come after compilation (no compile work in
them), and the doctor names no bottleneck from compile time. With $PERFLAB_GPU_ARTIFACTS set, each run's output
and trace are kept there.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_artifacts import keep

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
BLOCK = ROOT / "examples" / "stacks" / "compiled_block.py"
DECODE = ROOT / "examples" / "stacks" / "graphed_decode.py"
COMPILE_NAMES = ("call_user_compiler", "compile_attempt", "dynamo", "backend_compile", "autotune")


def perflab(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perflab", *args], capture_output=True, text=True, timeout=timeout)


def check_trace(trace: Path) -> dict:
    from perflab.analysis.steps.compile_work import compile_work
    from perflab.analysis.steps.windows import analysis_windows
    from perflab.doctor import diagnose
    from perflab.trace.kineto import load_ranks
    from perflab.trace.model import KERNEL

    t = load_ranks(trace)[0]
    assert int((t.kind == KERNEL).sum()) > 0, "no kernel recorded"
    work = compile_work(t, analysis_windows(t))
    assert work["compile_us"] == 0 and not work["mostly_compile"], work
    report = diagnose(trace)
    top = report.findings[0] if report.findings else None
    if top is not None and top.id == "host-compute":
        assert not any(n in (top.summary or "") for n in COMPILE_NAMES), top.summary
    return work


def test_investigate_keeps_a_compiled_function_working(tmp_path):
    out = tmp_path / "inv"
    proc = perflab("investigate", "--memory", "never", "--kernels", "1", "--ncu-timeout", "90", "--timeout", "150",
                   "--out", str(out), "--", sys.executable, str(BLOCK), "--iters", "400", timeout=400)
    keep("investigate_fn_default", proc, out / "trace.json.gz", out / "level1.log", out / "investigation.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((out / "investigation.json").read_text())
    level1 = record["levels"]["1"]
    log = (out / "level1.log").read_text()
    assert level1["status"] == "done" and level1["returncode"] == 0, level1
    assert "BackendCompilerFailed" not in log and "_RecordFunction" not in log
    assert "torch.compile'd function" in (level1.get("steps_by") or "")
    check_trace(out / "trace.json.gz")


CASES = [
    ("fn_default", BLOCK, ["--as", "function", "--mode", "default", "--iters", "400"], "torch.compile'd function"),
    ("module_reduce_overhead", BLOCK, ["--as", "module", "--mode", "reduce-overhead", "--iters", "400"], "nn.Module"),
    ("graphed_decode", DECODE, ["--steps", "200"], "CUDA graph replay"),
    ("module_max_autotune", BLOCK, ["--as", "module", "--mode", "max-autotune", "--iters", "400"], "nn.Module"),
]


@pytest.mark.parametrize("tag, program, args, steps_by", CASES, ids=[c[0] for c in CASES])
def test_profile_records_kernels_after_compilation(tmp_path, tag, program, args, steps_by):
    out = tmp_path / "prof"
    proc = perflab("profile", "--steps", "10", "--warmup", "3", "--out", str(out), "--",
                   sys.executable, str(program), *args)
    keep(f"profile_{tag}", proc, out / "trace.json.gz")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BackendCompilerFailed" not in proc.stderr
    assert "10 steps recorded (top-level" in proc.stdout and steps_by in proc.stdout, proc.stdout
    check_trace(out / "trace.json.gz")
