"""Compiled programs under perflab's hooks (CPU): the hooks stay out of what Dynamo traces, compilation is seen as
it happens, and `perflab profile` records steps of a compiled function or module after compilation.

The end-to-end runs compile with Inductor's C++ backend (tens of seconds each here, less with a warm cache);
the in-process checks use Dynamo's eager backend (Dynamo traces the same frames, nothing is code-generated).
"""
import gzip
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from perflab.toolkit.compile_watch import CompileWatch, Hider, watch_compiles  # noqa: E402
from perflab.toolkit.step_hooks import install_calls, install_ticker  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BLOCK = ROOT / "examples" / "stacks" / "compiled_block.py"


class NeverHides(Hider):
    """The hooks as they were before: installed as plain functions even once Dynamo is imported."""

    def dynamo_imported(self, dynamo):
        pass


def program(x):
    x = torch.relu(x) * 2
    time.sleep(0.002)  # a graph break: this runs in the compiled frame, with Dynamo's frame callback set
    return x + 1


def run_hooked(hider, calls=300, tick=True):
    """A compiled function called in a loop while ticks (every ms) enter a record_function, as the profiler's
    step does; returns (frames Dynamo compiled, what the hooks saw)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    watch, seen, ticks = CompileWatch(), [], []

    def on_tick():
        with torch.autograd.profiler.record_function("perflab-tick"):
            ticks.append(1)

    undo = [watch_compiles(torch, watch, hider), install_calls(torch, seen.append, hider),
            install_ticker(torch, on_tick, 0.001, hider) if tick else None]
    try:
        f = torch.compile(program, backend="eager")
        x = torch.randn(8)
        for _ in range(calls):
            f(x)
            watch.again()
    finally:
        for u in reversed([u for u in undo if u is not None]):
            u()
    return dict(counters["frames"]), seen, ticks, watch


@pytest.mark.filterwarnings("ignore:Dynamo does not know")
def test_ticks_landing_in_compiled_code_are_never_traced():
    alone, _, _, _ = run_hooked(Hider(), tick=False)
    frames, seen, ticks, watch = run_hooked(Hider())
    assert ticks, "no tick ran: the check proves nothing"
    assert frames == alone  # the program's frames, and nothing of perflab's
    assert seen == ["compiled"] * 300
    assert watch.count >= 1 and not watch.busy and watch.kinds["torch.compile (dynamo)"] >= 1


@pytest.mark.filterwarnings("ignore:Dynamo does not know")
def test_without_the_hider_dynamo_traces_the_tick_handler():
    """The hazard the Hider removes (a user's H100 run failed in Inductor on the record_function it traced)."""
    alone, _, _, _ = run_hooked(Hider(), tick=False)
    frames, _, ticks, _ = run_hooked(NeverHides())
    assert ticks and frames.get("total", 0) > alone.get("total", 0)


def test_a_compiled_function_called_inside_a_module_is_one_step():
    hider, seen = Hider(), []
    undo = install_calls(torch, seen.append, hider)
    try:
        inner = torch.compile(lambda x: x + 1, backend="eager")

        class M(torch.nn.Module):
            def forward(self, x):
                return inner(x)

        @torch.compile(backend="eager")  # torch.compile(**options) as a decorator: the inner call is patched too
        def outer(x):
            return x * 3

        m = M()
        for _ in range(3):
            m(torch.zeros(2))
        outer(torch.zeros(2))
    finally:
        undo()
    assert seen == ["module"] * 3 + ["compiled"]


def profile_block(tmp_path, *args, steps=5, warmup=2):
    out = tmp_path / "prof"
    proc = subprocess.run([sys.executable, "-m", "perflab", "profile", "--steps", str(steps), "--warmup",
                           str(warmup), "--out", str(out), "--", sys.executable, str(BLOCK), *args],
                          capture_output=True, text=True, timeout=600)
    return proc, out / "trace.json.gz"


def trace_facts(path: Path) -> tuple[list[int], list[str]]:
    doc = json.load(gzip.open(path))
    steps = sorted(int(m.group(1)) for e in doc["traceEvents"] if (m := re.fullmatch(r"ProfilerStep#(\d+)", e["name"])))
    return steps, [e["name"] for e in doc["traceEvents"] if e.get("ph") == "X"]


@pytest.mark.parametrize("kind, mode, by", [
    ("function", "default", "torch.compile'd function"),
    ("module", "max-autotune", "nn.Module"),
])
def test_profile_records_steps_after_compilation(tmp_path, kind, mode, by):
    from perflab.analysis.steps.compile_work import compile_work
    from perflab.trace.kineto import load_ranks

    proc, trace = profile_block(tmp_path, "--as", kind, "--mode", mode, "--iters", "60")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{kind} {mode}: first call" in proc.stdout  # the program ran to its end
    assert f"5 steps recorded (top-level {by} calls)" in proc.stdout
    assert "of compilation/capture (torch.compile (dynamo))" in proc.stdout
    steps, names = trace_facts(trace)
    assert len(steps) == 5 and steps[0] >= 3  # the compiling call and two steady warm-up steps came first
    assert any(n.startswith("Torch-Compiled Region") for n in names)  # the steps run the compiled code
    work = compile_work(load_ranks(trace)[0])
    assert work["compile_us"] == 0 and work["compiled_calls"] >= 5, work


def test_the_checker_warms_a_fix_until_a_call_compiles_nothing():
    from perflab.toolkit.compile_watch import warm_until_steady, watching

    graph_cls = torch.cuda.graphs.CUDAGraph
    begin = graph_cls.__dict__["capture_begin"]
    with watching(torch) as watch:
        assert graph_cls.__dict__["capture_begin"] is not begin  # capture is watched
        calls = []

        def run():  # recompiles on its first two calls, as a fix whose second call records a CUDA graph
            calls.append(1)
            if len(calls) <= 2:
                watch.start("torch.compile (dynamo)")
                watch.end()

        assert warm_until_steady(run, watch) == 3
        assert warm_until_steady(run, watch) == 1
    assert graph_cls.__dict__["capture_begin"] is begin
