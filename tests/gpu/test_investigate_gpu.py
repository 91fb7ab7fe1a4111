"""`perflab investigate` on a real GPU with the real Nsight Compute (run on the device:
python3 -m pytest -m gpu tests/gpu/test_investigate_gpu.py).

A puzzle's slow workload whose time is in one kernel (14-operator-hotspot: an fp32 GEMM head after bf16 blocks):
the walk must choose that kernel by the time it would save, profile the launch it chose in the timeline (not the
first launch of the first kernel), and give the same numbers as the ncu command it prints, run by hand. A program
that runs out of memory: level 1 fails, level 3 records the allocator's history and leads the report.
"""
import gzip
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = REPO / "src" / "perflab" / "catalog" / "14-operator-hotspot" / "workload.py"
RUNNER = REPO / "examples" / "run_workload.py"
OOM = """
import torch
torch.cuda.set_per_process_memory_fraction(0.02)   # a small cap: out of memory in a few steps, on any GPU
layer = torch.nn.Linear(1024, 1024, device="cuda")
kept = []
for _ in range(10_000):
    kept.append(layer(torch.randn(4096, 1024, device="cuda")))
"""

GROWING = """
import torch
class Grow(torch.nn.Module):           # one call = one step; each step's kernels get a bigger grid than the last
    def forward(self, n):
        return torch.cumsum(torch.arange(n, device="cuda", dtype=torch.float32), 0)
model = Grow()
for i in range(20):
    model(65536 * (i + 1))
torch.cuda.synchronize()
"""


def perflab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perflab", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    out = tmp_path_factory.mktemp("inv") / "kernel"
    proc = perflab("investigate", "--json", "--kernels", "1", "--memory", "never", "--marker", "step", "--out",
                   str(out), "--", sys.executable, str(RUNNER), str(WORKLOAD), "--steps", "20")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, json.loads(proc.stdout)


def test_the_kernel_with_the_most_to_save_is_profiled_at_the_chosen_launch(walked):
    import numpy as np

    from perflab.analysis.ncu.ncu_plan import function_rows
    from perflab.trace.kineto import load
    from perflab.trace.model import KERNEL

    out, d = walked
    l2 = d["levels"][1]
    k = l2["kernels"][0]
    print(json.dumps({key: k[key] for key in ("kernel", "gain_pct", "plan", "profiled", "verdict")}, indent=1))
    assert l2["status"] == "done" and k["status"] == "done"
    assert "f32" in k["kernel"] or "sgemm" in k["kernel"].lower()   # the fp32 head, not a bf16 block GEMM
    assert k["profiled"]["matches_chosen"], k["profiled"]
    # not the first launch of the first kernel: each step launches the bf16 blocks' kernels first, and the skip
    # passes over this kernel's launches of the warm-up steps and of the recorded steps before the chosen one
    trace = load(out / "trace.json.gz")
    first_kernel = int(np.flatnonzero(trace.kind == KERNEL)[np.argmin(trace.ts[trace.kind == KERNEL])])
    assert trace.name_of(first_kernel) != k["kernel"] and function_rows(trace, k["function"]).size
    assert k["plan"]["skip"] >= k["plan"]["steps_before"] > 0 and k["plan"]["exact"]
    assert d["headline"]["scope"] == "kernel" and d["headline"]["function"] == k["function"]
    # ncu's duration of that launch agrees with the timeline's (clocks left alone: --clock-control none)
    assert k["profiled"]["duration_us"] == pytest.approx(k["chosen_launch"]["duration_us"], rel=0.25)


def test_the_printed_ncu_command_run_by_hand_gives_the_same_numbers(walked, tmp_path):
    out, d = walked
    k = d["levels"][1]["kernels"][0]
    cmd = shlex.split(k["commands"]["record"])
    assert cmd[:2] == ["perflab", "ncu"]
    proc = perflab(*cmd[1:], cwd=REPO)
    assert (out / "by-hand" / "ncu-1.ncu-rep").exists(), proc.stderr[-2000:]
    from perflab.doctor.ncu import diagnose_ncu

    hand = diagnose_ncu(out / "by-hand" / "ncu-1.ncu-rep").to_dict()
    mine = k["report"]
    ours = [x for x in hand["analyses"]["kernels"] if x["grid"] and x["grid"][0] * x["grid"][1] * x["grid"][2] ==
            k["plan"]["grid"]]
    assert ours, hand["analyses"]["kernels"]
    assert ours[0]["duration_us"] == pytest.approx(mine["analyses"]["kernels"][0]["duration_us"], rel=0.10)
    assert hand["findings"][0]["id"] == mine["findings"][0]["id"]


def test_doctor_on_the_folder_gives_the_same_report(walked):
    out, d = walked
    proc = perflab("doctor", str(out), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == d


def test_out_of_memory_leads_to_the_memory_level(tmp_path):
    app = tmp_path / "oom.py"
    app.write_text(OOM)
    proc = perflab("investigate", "--json", "--kernels", "0", "--out", str(tmp_path / "inv"), "--", sys.executable,
                   str(app))
    d = json.loads(proc.stdout)
    l1, _, l3 = d["levels"]
    print(json.dumps({"l1": l1["top_line"], "l3": l3["top_line"], "reasons": l3.get("reasons")}, indent=1))
    assert proc.returncode == 1 and l1["status"] == "failed"
    assert l3["status"] == "done" and any("out of GPU memory" in r for r in l3["reasons"])
    # the allocator wastes nothing here: the program keeps it all, and level 3 leads with the out-of-memory error and
    # names the program's line that allocated most of it and holds it at the peak (not perflab's own call hooks,
    # which the recording runs under)
    assert d["headline"]["level"] == 3 and d["headline"]["scope"] == "memory"
    assert l3["evidence"]["held_at_peak"][0]["function"] == "oom.py:<module>"
    assert l3["top_line"].startswith("Out of memory") and "allocated at oom.py:7 <module>" in l3["top_line"]
    assert "step_hooks" not in l3["top_line"] and (tmp_path / "inv" / "memory.json.gz").exists()
    # the history came from level 1's run (no run of its own), the stacks of the recorded steps left out
    record = json.loads((tmp_path / "inv" / "investigation.json").read_text())
    assert record["levels"]["3"]["from_level1"] and record["levels"]["1"]["history"]["kept"]
    assert record["levels"]["1"]["history"]["stacks_left_out_while_profiling"]
    assert not (tmp_path / "inv" / "memory.log").exists()


def test_the_skip_lands_on_the_chosen_step_when_each_step_launches_a_different_grid(tmp_path):
    """Every step launches the same kernels at a grid of its own: ncu profiles the chosen launch only if the count
    from process start (warm-up steps included) is exact."""
    app = tmp_path / "grow.py"
    app.write_text(GROWING)
    proc = perflab("investigate", "--json", "--kernels", "2", "--min-gain", "0", "--memory", "never", "--out",
                   str(tmp_path / "inv"), "--", sys.executable, str(app))
    assert proc.returncode == 0, proc.stderr[-2000:]
    kernels = json.loads(proc.stdout)["levels"][1]["kernels"]
    print(json.dumps([{k: e[k] for k in ("function", "plan", "profiled")} for e in kernels], indent=1))
    assert len(kernels) == 2
    # both in one run of the program under ncu, each read at its position in the window
    runs = json.loads((tmp_path / "inv" / "investigation.json").read_text())["levels"]["2"]["passes"]
    assert len(runs) == 1 and all(k["profiled"]["position"] is not None for k in kernels)
    # the recording began after 3 steady warm-up steps; steps that held one-time work (imports) are not counted as
    # warm-up, so the first recorded step is ProfilerStep#3 or later, and the plan counts every step before it
    trace = json.loads(gzip.decompress((tmp_path / "inv" / "trace.json.gz").read_bytes()))
    numbers = sorted(int(e["name"].split("#")[1]) for e in trace["traceEvents"]
                     if str(e.get("name", "")).startswith("ProfilerStep#"))
    first = numbers[0]
    for k in kernels:  # the launch of the op call with the most to save: one step's, after the warm-up steps
        p = k["plan"]
        assert p["exact"] and p["steps_before"] == first >= 3 and p["per_step"] == 1
        assert p["step"] in numbers and k["profiled"]["matches_chosen"]
        assert p["skip"] == 3 + (p["step"] - 3) and p["count"] == 1
        assert k["profiled"]["matches_chosen"] and k["profiled"]["grid"] == p["grid"]
