"""Shared test set-up: user data and workspace in tmp; a tiny synthetic puzzle with recorded artifacts.

The puzzle engine reads evidence through three seams in perflab.puzzles.replay (load_trace,
summarize, diagnose). While the real Kineto reader, evidence summary and doctor are not there yet,
`evidence_backend` puts small stand-ins behind those seams; once they exist the tests use them.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import statistics
import textwrap
from collections import Counter
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
FAKE_ID = "zz-synthetic-sync"
GPU_NAME = "NVIDIA H100 80GB HBM3"
RECORD_DATE = "2026-11-22T10:00:00+00:00"


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PERFLAB_WORK", str(tmp_path / "work"))
    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.delenv("PERFLAB_CATALOG", raising=False)
    monkeypatch.delenv("PERFLAB_DEBUG", raising=False)


# --- a synthetic Kineto trace --------------------------------------------------------------------

def make_trace(*, steps: int, kernels: list[tuple[str, float]], step_us: float = 1000.0, syncs: int = 0,
               pageable_h2d: int = 0, pinned_h2d: int = 0, copy_bytes: int = 1 << 20) -> dict:
    """`steps` back-to-back ProfilerStep#N of step_us each; per step the listed kernels (name, µs) run one
    after the other from the step's start, then the copies; `syncs` cudaStreamSynchronize calls a step."""
    events = []
    t0 = 1_000_000.0
    for s in range(steps):
        start = t0 + s * step_us
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 1}", "pid": 1, "tid": 1,
                       "ts": start, "dur": step_us})
        ts = start + 1.0
        corr = 0
        for name, dur in kernels:
            corr += 1
            cid = s * 1000 + corr
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": ts, "dur": 0.5, "args": {"correlation": cid}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                           "args": {"device": 0, "stream": 7, "correlation": cid}})
            ts += dur
        for i in range(pageable_h2d + pinned_h2d):
            kind = "Pageable" if i < pageable_h2d else "Pinned"
            events.append({"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy HtoD ({kind} -> Device)", "pid": 0,
                           "tid": 7, "ts": ts, "dur": 50.0,
                           "args": {"device": 0, "stream": 7, "bytes": copy_bytes,
                                    "memory bandwidth (GB/s)": copy_bytes / 50e3}})
            ts += 50.0
        for _ in range(syncs):
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                           "ts": ts, "dur": 5.0, "args": {}})
            ts += 5.0
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": GPU_NAME, "computeMajor": 9,
                                                      "computeMinor": 0, "numSms": 132}],
            "distributedInfo": {"rank": 0}, "traceEvents": events}


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
                                                               step_us=400.0))
        (art / "manifest.json").write_text(json.dumps({
            "gpu": GPU_NAME, "cc": "9.0", "driver": "580.00", "cuda": "13.0", "torch": "2.11.0", "python": "3.12.3",
            "perflab": "0.1.0", "date": RECORD_DATE, "command": "scripts/record_artifacts.py", "host": "h100"}))
        (art / "measurements.json").write_text(json.dumps({
            "slow": {"median_ms": 1.0, "samples_ms": [1.0, 1.01, 0.99]},
            "solution": {"median_ms": 0.4, "samples_ms": [0.4, 0.41, 0.39]},
            "speedup": {"point": 2.5, "ci_low": 2.4, "ci_high": 2.6, "bar": 2.0}, "check": {}}))
    return folder


@pytest.fixture
def fake_catalog(tmp_path, monkeypatch, evidence_backend):
    """The synthetic puzzle alone: the shipped catalog is tested on its own (test_puzzle_catalog.py)."""
    from perflab.puzzles import catalog

    root = tmp_path / "catalog"
    make_puzzle(root)
    monkeypatch.setenv("PERFLAB_CATALOG", str(root))
    monkeypatch.setattr(catalog, "BUILTIN", tmp_path / "no-shipped-catalog")
    return root


def shipped_puzzles() -> list:
    """The shipped catalog for parametrizing, or [] when it does not load (test_shipped_catalog_is_valid says why)."""
    from perflab.puzzles import catalog
    from perflab.puzzles.spec import SpecError

    try:
        return catalog.load_catalog([catalog.BUILTIN])
    except SpecError:
        return []


# --- stand-ins for the reader, the evidence summary and the doctor --------------------------------

def real_backend_present() -> bool:
    try:
        import perflab.doctor as doctor
    except ImportError:
        return False
    return (importlib.util.find_spec("perflab.trace.kineto") is not None
            and importlib.util.find_spec("perflab.analysis.summary") is not None and hasattr(doctor, "diagnose"))


def fake_load(path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _union_us(intervals):
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def fake_summary(trace: dict) -> dict:
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    copies = [e for e in ev if e.get("cat") == "gpu_memcpy"]
    start = min(e["ts"] for e in ev)
    span = max(e["ts"] + e["dur"] for e in ev) - start
    n = len(steps) or 1
    totals, counts = Counter(), Counter()
    for k in kernels:
        totals[k["name"]] += k["dur"]
        counts[k["name"]] += 1
    ktotal = sum(totals.values()) or 1.0
    top = [{"name": name, "total_us": t, "count": counts[name], "pct": 100 * t / ktotal}
           for name, t in totals.most_common(10)]
    by_dir = {}
    for c in copies:
        d = "h2d" if "HtoD" in c["name"] else "d2h" if "DtoH" in c["name"] else "d2d"
        slot = by_dir.setdefault(d, {"count": 0, "bytes": 0, "total_us": 0.0, "pageable_count": 0, "gbps": 0.0})
        slot["count"] += 1
        slot["bytes"] += c["args"]["bytes"]
        slot["total_us"] += c["dur"]
        slot["pageable_count"] += "Pageable" in c["name"]
    for slot in by_dir.values():
        slot["gbps"] = slot["bytes"] / (slot["total_us"] * 1e3) if slot["total_us"] else 0.0
    syncs = Counter(e["name"] for e in ev if e.get("cat") == "cuda_runtime" and "Synchronize" in e["name"])
    busy = _union_us([(e["ts"], e["ts"] + e["dur"]) for e in kernels + copies])
    return {"device": (trace.get("deviceProperties") or [{}])[0].get("name", "cpu"), "steps": len(steps),
            "step_time_ms": statistics.median(e["dur"] for e in steps) / 1e3 if steps else span / 1e3,
            "span_ms": span / 1e3, "gpu_busy_pct": 100 * busy / span if span else 0.0,
            "kernels_per_step": len(kernels) / n, "mean_kernel_us": ktotal / len(kernels) if kernels else 0.0,
            "top_kernels": top, "copies": by_dir,
            "syncs": {"count": sum(syncs.values()), "per_step": sum(syncs.values()) / n, "names": dict(syncs)}}


def fake_diagnose(trace: dict):
    from perflab.doctor.finding import Finding, Report, rank

    s = fake_summary(trace)
    findings = []
    if s["syncs"]["per_step"] >= 1:
        findings.append(Finding("host-sync", "high", 50.0, {"syncs_per_step": s["syncs"]["per_step"]}, "drop .item()"))
    if sum(c["pageable_count"] for c in s["copies"].values()):
        findings.append(Finding("pageable-memcpy", "medium", 10.0, {}, "pin_memory"))
    findings = rank(findings) or [Finding("healthy", "info", 0.0, {}, "")]
    return Report(source={"kind": "kineto"}, verdict=findings[0].id, findings=findings)


def install_fakes(target=None) -> None:
    """Put the stand-ins behind perflab.puzzles.replay's seams (target: a monkeypatch, or None to set them)."""
    from perflab.puzzles import replay

    for name, fn in (("load_trace", fake_load), ("summarize", fake_summary), ("diagnose", fake_diagnose)):
        if target is None:
            setattr(replay, name, fn)
        else:
            target.setattr(replay, name, fn)


@pytest.fixture
def evidence_backend(monkeypatch):
    """'real' when perflab's reader, summary and doctor exist, else 'fake' (the stand-ins above)."""
    if real_backend_present():
        return "real"
    install_fakes(monkeypatch)
    return "fake"


# A launcher for subprocess tests: optionally make torch unimportable (counting the attempts), use
# the stand-ins where needed, then run main() on each JSON-encoded argument list given; after each
# command it prints `@@ <exit code> <torch imports tried so far>` to stderr.
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
    sys.path.insert(0, {tests!r})
    import conftest
    if not conftest.real_backend_present():
        conftest.install_fakes()
    from perflab.puzzles import catalog
    catalog.BUILTIN = catalog.BUILTIN.parent / "no-shipped-catalog"  # as the fake_catalog fixture does
    from perflab.__main__ import main
    for args in sys.argv[1:]:
        rc = main(json.loads(args))
        print(f"@@ {{rc}} {{len(tried)}}", file=sys.stderr, flush=True)
''')


def run_cli_subprocess(commands: list[list[str]], hide_torch: bool = True) -> tuple[list[tuple[int, int]], str, str]:
    """Run perflab commands in one fresh interpreter: ([(exit code, torch imports tried so far)], stdout, stderr)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", LAUNCHER.format(hide_torch=hide_torch, tests=str(TESTS)),
                           *(json.dumps(c) for c in commands)], capture_output=True, text=True, timeout=120)
    marks = [tuple(map(int, line.split()[1:])) for line in proc.stderr.splitlines() if line.startswith("@@ ")]
    assert len(marks) == len(commands), proc.stderr
    return marks, proc.stdout, proc.stderr
