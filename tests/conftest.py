"""Shared test set-up: user data and workspace in tmp; a tiny synthetic puzzle with recorded artifacts.

The synthetic recording goes through the real Kineto reader, evidence summary and doctor.
"""
from __future__ import annotations

import gzip
import json
import textwrap
from pathlib import Path

import pytest

FAKE_ID = "zz-synthetic-sync"
GPU_NAME = "NVIDIA H100 80GB HBM3"
RECORD_DATE = "2026-11-22T10:00:00+00:00"


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PERFLAB_WORK", str(tmp_path / "work"))
    monkeypatch.setenv("PERFLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.delenv("PERFLAB_CATALOG", raising=False)
    monkeypatch.delenv("PERFLAB_DEBUG", raising=False)


# --- a synthetic Kineto trace --------------------------------------------------------------------

def make_trace(*, steps: int, kernels: list[tuple[str, float]], step_us: float = 1000.0, syncs: int = 0,
               pageable_h2d: int = 0, pinned_h2d: int = 0, copy_bytes: int = 1 << 20) -> dict:
    """`steps` ProfilerStep#N of step_us each, shaped like a real step: the host copies the inputs
    (a pageable cudaMemcpyAsync blocks the host while its DMA runs, a pinned one returns at once),
    launches the kernels ahead of the GPU (they queue and run back to back), then calls
    cudaStreamSynchronize `syncs` times: the first waits until the GPU has drained its queue, the
    others return at once. The GPU stays idle from there to the next step."""
    events = []
    t0 = 1_000_000.0
    corr = 0

    def add(cat, name, ts, dur, **args):
        tid = (0, 7) if cat in ("kernel", "gpu_memcpy") else (1, 1)
        events.append({"ph": "X", "cat": cat, "name": name, "pid": tid[0], "tid": tid[1], "ts": ts, "dur": dur,
                       "args": args})

    for s in range(steps):
        start = t0 + s * step_us
        add("user_annotation", f"ProfilerStep#{s + 1}", start, step_us)
        host = gpu = start + 1.0
        for i in range(pageable_h2d + pinned_h2d):
            pageable = i < pageable_h2d
            corr += 1
            call_us = 55.0 if pageable else 2.0
            add("cuda_runtime", "cudaMemcpyAsync", host, call_us, correlation=corr)
            gpu = max(gpu, host + (4.0 if pageable else 1.0))
            add("gpu_memcpy", f"Memcpy HtoD ({'Pageable' if pageable else 'Pinned'} -> Device)", gpu, 50.0,
                device=0, stream=7, correlation=corr, bytes=copy_bytes,
                **{"memory bandwidth (GB/s)": copy_bytes / 50e3})
            gpu += 50.0
            host += call_us + 1.0
        for name, dur in kernels:
            corr += 1
            add("cuda_runtime", "cudaLaunchKernel", host, 0.5, correlation=corr)
            gpu = max(gpu, host + 2.0)
            add("kernel", name, gpu, dur, device=0, stream=7, correlation=corr)
            gpu += dur
            host += 1.0
        for k in range(syncs):
            done = (max(gpu, host) if k == 0 else host) + 2.0
            add("cuda_runtime", "cudaStreamSynchronize", host, done - host)
            host = done + 1.0
        assert max(gpu, host) < start + step_us, "the step's work must fit in the step"
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": GPU_NAME, "computeMajor": 9,
                                                      "computeMinor": 0, "numSms": 132}],
            "distributedInfo": {"rank": 0}, "traceEvents": events}


def retouched_trace(path: Path, doc_edit=None, **by_category) -> Path:
    """synthetic.host_bound(steps=3) as JSON, every event of a category passed through its function
    edit(event, index among that category's events); doc_edit(doc) for the rest."""
    from perflab.trace.builders import synthetic

    doc = synthetic.host_bound(steps=3).to_dict()
    seen: dict[str, int] = {}
    for ev in doc["traceEvents"]:
        cat = ev.get("cat")
        if cat in by_category:
            by_category[cat](ev, seen.setdefault(cat, 0))
            seen[cat] += 1
    if doc_edit:
        doc_edit(doc)
    path.write_text(json.dumps(doc))
    return path


def cli_run(capsys, *args) -> tuple[int, str, str]:
    """perflab ARGS in this process: (exit code, stdout, stderr)."""
    from perflab.__main__ import main

    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def write_trace(path: Path, trace: dict) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(trace, fh)
    return path


# Slow: 40 short kernels, a big gemm, two syncs and two pageable copies per step.
SLOW_KERNELS = [("void gemm_bf16_kernel<128, 128>", 300.0)] + [("elementwise_add_kernel", 5.0)] * 40
FIXED_KERNELS = [("void gemm_bf16_kernel<128, 128>", 300.0), ("fused_add_kernel", 20.0)]

PUZZLE_TOML = '''
id = "{pid}"
title = "Synthetic: a step that waits on the host"
level = 1
order = 990
prerequisites = []
seeds = ["tests"]
taxonomy = ["host-sync", "pageable-memcpy"]
tools = ["torch-profiler"]
story = """A tiny CPU workload with a recorded (synthetic) trace, for the engine's tests."""
question = "Why is the GPU idle?"
look_at = "torch.profiler trace: the gaps after cudaStreamSynchronize"
hints = ["look at the timeline", "count the syncs per step", "remove the .item() calls"]

[requirements]
gpu = false

[profile]
warmup = 1
steps = 3

[check]
speedup = 2.0
planted = "host-sync"
reps = 15

[[questions]]
key = "cause"
prompt = "Which taxonomy id names the bottleneck?"
type = "taxonomy"
analysis = "doctor_top_id"

[[questions]]
key = "syncs"
prompt = "How many host syncs per step?"
type = "number"
analysis = "syncs_per_step"
tolerance = 0.01

[[questions]]
key = "kernel"
prompt = "Which kernel takes the most time?"
type = "text"
analysis = "top_kernel"

[[questions]]
key = "kernels"
prompt = "How many kernels per step?"
type = "number"
analysis = "kernels_per_step"
tolerance = 0.05

[[questions]]
key = "busy"
prompt = "GPU busy %?"
type = "number"
analysis = "gpu_busy_pct"
tolerance = 0.15

[[questions]]
key = "pageable"
prompt = "Pageable copies per step?"
type = "number"
analysis = "pageable_copies_per_step"

[[questions]]
key = "h2d"
prompt = "Bytes copied host to device per step?"
type = "number"
analysis = "copy_bytes_per_step"

[[questions]]
key = "speedup"
prompt = "Recorded speed-up?"
type = "number"
analysis = "speedup"

[[questions]]
key = "fixed"
prompt = "Is the solution's step faster?"
type = "choice"
analysis = "summary_field"
args = {{ path = "steps", variant = "solution" }}
choices = ["3", "4"]
'''

# The workload: many tiny ops in a Python loop (slow) vs one reduction (solution). CPU-capable.
WORKLOAD = '''
import torch
N_TERMS = 300

def setup(device, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(64, generator=g).to(device)
    w = torch.rand(N_TERMS, 64, generator=g).to(device)
    return {"x": x, "w": w, "out": torch.empty(64, device=device)}

def step(state):
    acc = state["x"].clone()
    for i in range(N_TERMS):
        acc = acc + 1e-3 * state["w"][i]
    state["out"].copy_(acc)
    return state["out"]
'''
SOLUTION = WORKLOAD.split("def step")[0] + '''def step(state):
    torch.add(state["x"], state["w"].sum(0), alpha=1e-3, out=state["out"])
    return state["out"]
'''


def make_puzzle(root: Path, pid: str = FAKE_ID, toml: str | None = None, artifacts: bool = True) -> Path:
    """A puzzle folder under root: puzzle.toml, the three variants, and synthetic recorded artifacts."""
    folder = root / f"99-{pid}"
    folder.mkdir(parents=True)
    (folder / "puzzle.toml").write_text(toml if toml is not None else PUZZLE_TOML.format(pid=pid))
    (folder / "workload.py").write_text(WORKLOAD)
    (folder / "starter.py").write_text("# TODO: make step() fast\n" + WORKLOAD)
    (folder / "solution.py").write_text(SOLUTION)
    (folder / "README.md").write_text("synthetic\n")
    if artifacts:
        art = folder / "artifacts"
        art.mkdir()
        write_trace(art / "slow.trace.json.gz", make_trace(steps=3, kernels=SLOW_KERNELS, syncs=2, pageable_h2d=2))
        write_trace(art / "solution.trace.json.gz", make_trace(steps=3, kernels=FIXED_KERNELS, pinned_h2d=2,
                                                               step_us=430.0))
        (art / "manifest.json").write_text(json.dumps({
            "gpu": GPU_NAME, "cc": "9.0", "driver": "580.00", "cuda": "13.0", "torch": "2.11.0", "python": "3.12.3",
            "perflab": "0.1.0", "date": RECORD_DATE, "command": "scripts/record.py puzzle", "host": "h100"}))
        (art / "measurements.json").write_text(json.dumps({
            "slow": {"median_ms": 1.0, "samples_ms": [1.0, 1.01, 0.99]},
            "solution": {"median_ms": 0.4, "samples_ms": [0.4, 0.41, 0.39]},
            "speedup": {"point": 2.5, "ci_low": 2.4, "ci_high": 2.6, "bar": 2.0}, "check": {}}))
    return folder


@pytest.fixture
def fake_catalog(tmp_path, monkeypatch):
    """The synthetic puzzle alone: the shipped catalog is tested on its own (test_puzzle_catalog.py)."""
    from perflab.puzzles.engine import catalog

    root = tmp_path / "catalog"
    make_puzzle(root)
    monkeypatch.setenv("PERFLAB_CATALOG", str(root))
    monkeypatch.setattr(catalog, "BUILTIN", tmp_path / "no-shipped-catalog")
    return root


def shipped_puzzles() -> list:
    """The shipped catalog for parametrizing, or [] when it does not load (test_shipped_catalog_is_valid says why)."""
    from perflab.puzzles.engine import catalog
    from perflab.puzzles.engine.spec import SpecError

    try:
        return catalog.load_catalog([catalog.BUILTIN])
    except SpecError:
        return []


# A launcher for subprocess tests: optionally make torch unimportable (counting the attempts), then
# run main() on each JSON-encoded argument list given; after each command it prints
# `@@ <exit code> <torch imports tried so far>` to stderr.
LAUNCHER = textwrap.dedent('''
    import json, sys
    tried = []

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                tried.append(name)
                raise ImportError("torch is hidden by the test")
            return None

    if {hide_torch}:
        sys.meta_path.insert(0, NoTorch())
    if not {shipped}:
        from perflab.puzzles.engine import catalog
        catalog.BUILTIN = catalog.BUILTIN.parent / "no-shipped-catalog"  # as the fake_catalog fixture does
    from perflab.__main__ import main
    for args in sys.argv[1:]:
        rc = main(json.loads(args))
        print(f"@@ {{rc}} {{len(tried)}}", file=sys.stderr, flush=True)
''')


def run_cli_subprocess(commands: list[list[str]], hide_torch: bool = True,
                       shipped: bool = False) -> tuple[list[tuple[int, int]], str, str]:
    """Run perflab commands in one fresh interpreter: ([(exit code, torch imports tried so far)], stdout, stderr).

    shipped: with the shipped catalog (else only PERFLAB_CATALOG's puzzles)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", LAUNCHER.format(hide_torch=hide_torch, shipped=shipped),
                           *(json.dumps(c) for c in commands)], capture_output=True, text=True, timeout=120)
    marks = [tuple(map(int, line.split()[1:])) for line in proc.stderr.splitlines() if line.startswith("@@ ")]
    assert len(marks) == len(commands), proc.stderr
    return marks, proc.stdout, proc.stderr


def shipped_file(folder: Path, name: str) -> Path:
    """A shipped puzzle's source by name (workload, solution, before, a stage, or starter: the one
    `perflab start` derives from the workload, engine/starter.py)."""
    if name == "starter":
        from perflab.puzzles.engine import spec

        return spec.load(Path(folder) / "puzzle.toml").file("starter")
    return Path(folder) / f"{name}.py"


def served_variants(puzzle, seed: int = 5) -> dict:
    """A serving puzzle's slow workload and solution, one pass of the stream each on one seed on the CPU:
    (state, outputs) per variant."""
    from perflab.puzzles.engine import runner

    out = {}
    for variant in ("slow", "solution"):
        module = runner.load_module(puzzle.file(variant))
        state = module.setup("cpu", seed)
        out[variant] = (state, module.step(state))
    return out


def assert_inputs_follow_the_seed(module, keys=("a", "b")) -> None:
    """A workload's setup(device, seed) draws the same inputs for the same seed and others for another seed."""
    import torch

    one, again, other = (module.setup("cpu", s) for s in (3, 3, 4))
    assert all(torch.equal(one[k], again[k]) for k in keys)
    assert not torch.equal(one[keys[0]], other[keys[0]])


def assert_sized_for_the_device(module, monkeypatch) -> None:
    """A workload's setup asks perflab.workloads.sizes for its size with its own SIZE and SMOKE_SIZE (SMOKE_SIZE
    on the CPU), so the size a tool patches into SIZE is the one a GPU run uses."""
    from perflab.workloads import sizes

    asked, pick = [], sizes.pick
    monkeypatch.setattr(sizes, "pick", lambda device, size, smoke: asked.append((str(device), size, smoke))
                        or pick(device, size, smoke))
    module.setup("cpu", 0)
    assert asked and all(a == ("cpu", module.SIZE, module.SMOKE_SIZE) for a in asked)

@pytest.fixture
def straggler_recording(tmp_path):
    """The DDP example with 5 ms of host work on rank 1 (tests/data/multigpu/h200x2, 2 x H200) as a recording:
    the straggler job as its slow variant, the plain DDP job as its solution."""
    import shutil

    from perflab.puzzles.engine import replay

    fixtures = Path(__file__).parent / "data" / "multigpu" / "h200x2"
    folder = tmp_path / "artifacts"
    shutil.copytree(fixtures / "straggler", replay.ranks_dir(folder, "slow"))
    shutil.copytree(fixtures / "ddp", replay.ranks_dir(folder, "solution"))
    (folder / "manifest.json").write_text((fixtures / "manifest.json").read_text())
    (folder / "measurements.json").write_text(json.dumps({"speedup": {"point": 1.3}}))
    return replay.Evidence(folder, "straggler")
