"""`perflab investigate` on the CPU: the walk's orchestration with a stand-in `ncu` on PATH (a script that writes a
report and records its arguments) and level 1 taken from a recorded H100 trace, then a real failing program.

The stand-in lets the tests see the exact ncu command the walk runs (filter, skip, count, --clock-control none,
--kill yes), a report whose launch matches the chosen one and one whose does not, and an ncu run that outlasts its
time limit; the GPU tests (tests/gpu/test_investigate_gpu.py) run the real thing."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import cli_run

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "tests" / "data" / "kineto" / "h100_sol_attention_by_hand.trace.json.gz"
NCU_CSV = REPO / "tests" / "data" / "ncu" / "memory_bound_scalar.csv"
SNAPSHOT = REPO / "tests" / "data" / "memory" / "h100_graphs_per_batch.memory.json.gz"
# The kernel level 1 chooses first in TRACE (most time to save at its speed of light) and its launch there.
MASKED_FILL = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous "
               "namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() "
               "const::{lambda()#6}::operator()() const::{lambda(float, bool)#1}>(at::TensorIteratorBase&, "
               "at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::"
               "{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::{lambda(float, bool)#1} const&)"
               "::{lambda(int)#1}>(int, at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, "
               "c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::{lambda(float, "
               "bool)#1})")

FAKE_NCU = '''#!{python}
"""A stand-in for Nsight Compute: records its arguments, writes the report it is given."""
import json, os, shutil, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_NCU_LOG"], "a") as fh:
    fh.write(json.dumps(args) + "\\n")
if "--query-metrics" in args:
    print("gpu__time_duration  Counter  ns  Total duration")
    sys.exit(0)
if "--import" in args:
    sys.stdout.write(open(os.environ["FAKE_NCU_REPORT"]).read())
    sys.exit(0)
time.sleep(float(os.environ.get("FAKE_NCU_SLEEP", "0")))
base = args[args.index("-o") + 1]
shutil.copy(os.environ["FAKE_NCU_REPORT"], base + ".ncu-rep")
'''


def report_for(path: Path, kernel: str, grid: int, block: int) -> Path:
    """The recorded raw-page CSV with its one kernel renamed and relaunched at `grid` x `block`."""
    rows = list(csv.reader(NCU_CSV.open()))
    head = rows[0]
    for row in rows[2:]:
        row[head.index("Kernel Name")] = kernel
        row[head.index("Grid Size")], row[head.index("Block Size")] = f"({grid}, 1, 1)", f"({block}, 1, 1)"
        for col, value in (("launch__grid_dim_x", grid), ("launch__grid_size", grid), ("launch__block_dim_x", block),
                           ("launch__block_size", block)):
            row[head.index(col)] = str(value)
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows(rows)
    path.write_text(buf.getvalue())
    return path


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ncu = bin_dir / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable))
    ncu.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu-calls.jsonl"))
    monkeypatch.setenv("FAKE_NCU_REPORT", str(report_for(tmp_path / "report.csv", MASKED_FILL, 131072, 128)))

    def calls() -> list[list[str]]:
        log = tmp_path / "ncu-calls.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


def recorded_meta(out: Path) -> dict:
    """What level 1's profiled process reports when it 'writes' TRACE into `out`: memory near capacity."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(TRACE, out / "trace.json.gz")
    return {"trace": str(out / "trace.json.gz"), "steps_by": "top-level nn.Module calls", "recorded_steps": 5,
            "memory": {"device": "NVIDIA H100 80GB HBM3", "total_mb": 81089.0, "peak_reserved_mb": 76000.0,
                       "peak_allocated_mb": 70000.0, "reserved_mb": 70000.0, "num_ooms": 0,
                       "num_alloc_retries": 0, "private_pools": 0}}


@pytest.fixture
def recorded_level1(monkeypatch):
    """Level 1 without a GPU: the profiled run 'writes' TRACE, and its process reports memory near capacity."""
    from perflab.toolkit import memory_record, profile

    def fake_profile(cmd, *, out, run=None, **kwargs):
        return profile.ProfiledRun(0, [out / "trace.json.gz"], [recorded_meta(out)])

    def fake_record(cmd, *, out, target, max_entries, run=None, force=False):
        shutil.copy(SNAPSHOT, out)
        return memory_record.MemoryRun(0, out, [{"snapshot": str(out), "torch": True}])

    monkeypatch.setattr(profile, "profile_command", fake_profile)
    monkeypatch.setattr(memory_record, "record_command", fake_record)


def script(tmp_path: Path, body: str = "print('hello')\n") -> str:
    path = tmp_path / "app.py"
    path.write_text(body)
    return str(path)


def test_walk_profiles_the_chosen_launch_and_reads_every_level(tmp_path, fake_ncu, recorded_level1):
    """The run-per-kernel way (kept for side-by-side timing; test_investigate_one_pass.py has the one-run way)."""
    from perflab.toolkit.investigate import Options, investigate

    app = script(tmp_path)
    inv = investigate(["python", app], tmp_path / "inv", Options(kernels=2, ncu_runs="per-kernel", section_set="full"))
    calls = [c for c in fake_ncu() if "-o" in c]
    assert len(calls) == 2  # two kernels chosen, one ncu run each
    assert calls[0][calls[0].index("--set") + 1] == "full"
    first = calls[0]
    assert first[first.index("--clock-control") + 1] == "none" and first[first.index("--kill") + 1] == "yes"
    assert first[first.index("--kernel-name") + 1] == "regex:^elementwise_kernel$"
    # the chosen launch is in ProfilerStep#4 (the middle recorded step); the steps before the trace and the
    # matching launches of the recorded steps before it make the skip
    d = inv.to_dict()
    k1 = d["levels"][1]["kernels"][0]
    plan = k1["plan"]
    assert first[first.index("--launch-skip") + 1] == str(plan["skip"])
    assert first[first.index("--launch-count") + 1] == str(plan["count"]) == "1"
    assert plan["skip"] == round(plan["steps_before"] * plan["per_step"]) + plan["index_in_steps"]
    assert first[-2:] == ["python", app]
    assert k1["function"] == "elementwise_kernel" and k1["status"] == "done"
    assert k1["profiled"]["matches_chosen"] and k1["profiled"]["grid"] == 131072
    assert k1["finding"] is not None and k1["report"]["source"]["kind"] == "ncu"
    # the second kernel's report holds the same launch (the stand-in always writes it): not the chosen one, said so
    k2 = d["levels"][1]["kernels"][1]
    assert k2["function"] == "unrolled_elementwise_kernel"
    assert "profiled" not in k2 or not k2["profiled"]["matches_chosen"]
    assert d["levels"][0]["status"] == "done" and d["levels"][0]["finding"]["id"] == "unfused-elementwise"
    assert d["levels"][2]["status"] == "done" and d["levels"][2]["finding"]["id"] == "memory-capacity"
    assert "peaked at" in d["levels"][2]["why"]
    assert d["headline"]["function"] == "elementwise_kernel"
    record = json.loads((tmp_path / "inv" / "investigation.json").read_text())
    assert record["levels"]["2"]["kernels"][0]["command"][1:] == first


def test_an_ncu_run_past_its_limit_is_reported_and_the_other_levels_stand(tmp_path, fake_ncu, recorded_level1,
                                                                          monkeypatch):
    from perflab.toolkit.investigate import Options, investigate

    monkeypatch.setenv("FAKE_NCU_SLEEP", "30")
    inv = investigate(["python", script(tmp_path)], tmp_path / "inv", Options(kernels=1, ncu_timeout_s=1.0))
    d = inv.to_dict()
    k = d["levels"][1]["kernels"][0]
    assert k["status"] == "timed-out" and "time limit" in k["error"]
    assert d["levels"][1]["status"] == "failed"
    assert d["levels"][0]["status"] == "done" and d["levels"][2]["status"] == "done"
    assert k["commands"]["record"].startswith("perflab ncu --kernel '^elementwise_kernel$' --launch-skip ")


def test_without_ncu_level_2_is_skipped_and_says_why(tmp_path, recorded_level1, monkeypatch):
    from perflab.toolkit import investigate as lib

    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu anywhere on it
    monkeypatch.setattr("perflab.trace.nsight_compute.ncu_tool.NCU_GLOBS", ())
    d = lib.investigate(["python", script(tmp_path)], tmp_path / "inv", lib.Options()).to_dict()
    assert d["levels"][1]["status"] == "skipped" and "ncu" in d["levels"][1]["notes"][0]
    assert d["levels"][1]["kernels"][0]["commands"]["record"].startswith("perflab ncu ")


def test_a_failing_program_is_reported_with_its_output(tmp_path, capsys):
    app = script(tmp_path, "import sys\nprint('loading the model')\nsys.exit('no such checkpoint: x.pt')\n")
    rc, out, err = cli_run(capsys, "investigate", "--out", str(tmp_path / "inv"), "--", sys.executable, app)
    assert rc == 1
    assert "[failed" in out and "exited with status 1" in out and "no such checkpoint" in out
    d = json.loads(cli_run(capsys, "doctor", str(tmp_path / "inv"), "--json")[1])
    assert d["levels"][0]["status"] == "failed" and d["levels"][2]["status"] == "not-needed"
    assert "level 1" in err  # progress went to stderr


def test_doctor_on_the_folder_prints_the_same_report(tmp_path, capsys, fake_ncu, recorded_level1):
    app = script(tmp_path)
    rc, out, _ = cli_run(capsys, "investigate", "--json", "--kernels", "1", "--out", str(tmp_path / "inv"), "--",
                         "python", app)
    assert rc == 0, out
    live = json.loads(out)
    rc, out, _ = cli_run(capsys, "doctor", str(tmp_path / "inv"), "--json")
    assert rc == 0 and json.loads(out) == live
    text = cli_run(capsys, "doctor", str(tmp_path / "inv"))[1]
    assert "level 2 · kernel" in text and "record by hand: perflab ncu --kernel '^elementwise_kernel$'" in text


def test_memory_record_without_cuda_says_why(tmp_path, capsys):
    app = script(tmp_path, "import torch\nprint(torch.ones(3).sum())\n")
    rc, _, err = cli_run(capsys, "memory", "record", "--out", str(tmp_path / "m.json.gz"), "--", sys.executable, app)
    assert rc == 2 and "never initialized CUDA" in err and err.count("\n") == 1
