"""Step detection: the detector's logic with fake sessions, the hooks on real torch (CPU), targets."""
import os
import runpy
import sys
import threading
from pathlib import Path

import pytest

from perflab.errors import PerflabError
from perflab.toolkit.profile import BOOT_DIR, find_target, trace_name
from perflab.toolkit.steps import StepDetector


class FakeSession:
    def __init__(self, log, done_after=None):
        self.log, self.done_after, self.n, self.done = log, done_after, 0, False
        log.append(("new", self))

    def begin(self, first_step=0):
        self.first_step = first_step
        self._count("begin")

    def step(self):
        self._count("step")

    def _count(self, what):
        self.n += 1
        self.log.append((what, self))
        self.done = self.done_after is not None and self.n >= self.done_after

    def close(self):
        self.log.append(("close", self))
        return Path("trace.json.gz")

    def discard(self):
        self.log.append(("discard", self))


def detector(marker=None, done_after=None, on_done=None):
    log = []
    return StepDetector(lambda: FakeSession(log, done_after), marker=marker, on_done=on_done), log


def kinds(log):
    return [k for k, _ in log]


def test_module_calls_begin_then_step():
    d, log = detector()
    for _ in range(3):
        d.module_called()
    assert kinds(log) == ["new", "begin", "step", "step"]
    assert d.boundaries == 3 and d.mode == "module"
    assert d.describe() == "top-level nn.Module calls"


def test_time_mode_is_superseded_by_the_first_module_call():
    d, log = detector()
    d.tick()
    d.tick()
    assert d.mode == "time" and d.boundaries == 2
    d.module_called()
    assert kinds(log) == ["new", "begin", "step", "discard", "new", "begin"]
    assert d.mode == "module" and d.boundaries == 1
    d.tick()  # ticks no longer count
    assert d.boundaries == 1


def test_marker_mode_ignores_modules_and_ticks():
    d, log = detector(marker="decode")
    d.module_called()
    d.tick()
    assert log == []
    d.marker_entered()
    d.marker_entered()
    assert kinds(log) == ["new", "begin", "step"] and d.describe() == "entries of the range 'decode'"


def test_done_session_stops_counting_and_calls_on_done():
    done = []
    d, log = detector(marker="step", done_after=2, on_done=lambda: done.append(True))
    for _ in range(5):
        d.marker_entered()
    assert d.boundaries == 2 and done == [True]


def test_a_finished_module_trace_is_superseded_by_graph_replays():
    """A serving loop: module calls warm up and capture the graph, then only replays run. The module-call
    recording (finished inside the set-up) is discarded; the replays are the steps."""
    done = []
    d, log = detector(done_after=2, on_done=lambda: done.append(True))
    for _ in range(5):
        d.module_called()
    assert d.done and done == []  # hooks stay: a replay may still come
    d.called("graph")
    assert kinds(log)[-3:] == ["discard", "new", "begin"] and d.mode == "graph"
    d.module_called()  # a module call between replays is not a step any more
    d.called("graph")
    assert d.boundaries == 2 and done == [True]
    assert d.describe() == "top-level CUDA graph replay calls"


def test_only_the_first_thread_counts():
    d, log = detector()
    d.module_called()
    t = threading.Thread(target=d.module_called)
    t.start()
    t.join()
    assert d.boundaries == 1


def test_reentrant_boundary_is_ignored():
    d, log = detector()
    d.module_called()
    d._busy = True  # as when a tick's signal handler lands inside a boundary
    d.tick()
    d.module_called()
    assert d.boundaries == 1


def test_finish_closes_and_stops():
    d, log = detector()
    assert d.finish() is None and d.describe() is None
    d.module_called()
    assert d.boundaries == 0  # finished: nothing begins any more
    d, log = detector()
    d.module_called()
    assert d.finish() == Path("trace.json.gz") and kinds(log)[-1] == "close"
    d.module_called()
    assert d.boundaries == 1


def test_module_hook_counts_top_level_calls_only():
    torch = pytest.importorskip("torch")
    from perflab.toolkit.compile_watch import Hider
    from perflab.toolkit.step_hooks import install_calls

    calls = []
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(4, 2)))
    uninstall = install_calls(torch, calls.append, Hider())
    try:
        x = torch.zeros(1, 4)
        for _ in range(3):
            model(x)
        torch.nn.ReLU()(x)  # another top-level call
    finally:
        uninstall()
    model(x)
    assert calls == ["module"] * 4
    assert torch.nn.Module.__call__ is not None and not hasattr(torch.nn.Module.__call__, "__wrapped__")
    assert not hasattr(torch.compile, "__wrapped__") and not hasattr(torch.cuda.graphs.CUDAGraph.replay, "__wrapped__")


def test_marker_hook_counts_outermost_named_ranges():
    torch = pytest.importorskip("torch")
    from perflab.toolkit.compile_watch import Hider
    from perflab.toolkit.step_hooks import install_marker

    calls = []
    uninstall = install_marker(torch, "iter", lambda: calls.append(1), Hider())
    try:
        for _ in range(3):
            with torch.profiler.record_function("iter"):
                with torch.profiler.record_function("iter"):  # nested: same step
                    pass
            with torch.profiler.record_function("other"):
                pass
    finally:
        uninstall()
    with torch.profiler.record_function("iter"):
        pass
    assert len(calls) == 3


def test_find_target(tmp_path):
    script = tmp_path / "run.py"
    script.write_text("")
    assert find_target(["python", "-u", str(script), "x.py"]) == {"script": os.path.realpath(script)}
    assert find_target(["torchrun", "--nproc-per-node", "2", str(script)]) == {"script": os.path.realpath(script)}
    assert find_target(["python", "-m", "torch.distributed.run", "-m", "pkg.main"]) == {"module": "pkg.main"}
    assert find_target(["bash", "go.sh"], target=str(script)) == {"script": os.path.realpath(script)}
    assert find_target(["bash", "go.sh"], target="pkg.serve") == {"module": "pkg.serve"}
    with pytest.raises(PerflabError, match="--target"):
        find_target(["python", "-c", "pass"])


def test_trace_name_per_rank():
    assert trace_name({}) == "trace.json.gz"
    assert trace_name({"RANK": "3", "LOCAL_RANK": "1"}) == "rank3.trace.json.gz"
    assert trace_name({"LOCAL_RANK": "1"}) == "rank1.trace.json.gz"


def test_sitecustomize_matches_only_the_target(monkeypatch, tmp_path):
    boot = runpy.run_path(str(BOOT_DIR / "sitecustomize.py"), run_name="boot")  # no PERFLAB_PROFILE: a no-op
    script = tmp_path / "s.py"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["s.py", "a"])
    assert boot["_is_target"]({"script": os.path.realpath(script)})
    assert not boot["_is_target"]({"script": "/elsewhere/s.py"})
    monkeypatch.setattr(sys, "argv", ["-m"])
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "pkg.main", "x"])
    assert boot["_is_target"]({"module": "pkg.main"})
    assert not boot["_is_target"]({"module": "pkg"})


def test_a_finished_time_trace_is_still_superseded_by_module_calls():
    done = []
    d, log = detector(done_after=2, on_done=lambda: done.append(True))
    d.tick()
    d.tick()
    assert d.done and done == []  # hooks stay: a model may still appear
    d.module_called()
    assert kinds(log)[-3:] == ["discard", "new", "begin"] and d.mode == "module"


def test_a_failing_profiler_never_raises_into_the_script():
    class Broken(FakeSession):
        def step(self):
            raise RuntimeError("kineto said no")

    log, done = [], []
    d = StepDetector(lambda: Broken(log), on_done=lambda: done.append(True))
    d.module_called()
    d.module_called()  # must not raise
    assert d.error == "RuntimeError: kineto said no" and d.finished and done == [True]
    d.module_called()
    assert d.boundaries == 1


def watched_detector(warmup=3):
    from perflab.toolkit.compile_watch import CompileWatch

    log, watch = [], CompileWatch()
    return StepDetector(lambda: FakeSession(log), warmup=warmup, watch=watch), log, watch


def test_warmup_counts_only_steady_steps():
    d, log, watch = watched_detector(warmup=3)
    d.called("compiled")          # step 1 begins: the first call compiles
    watch.start("torch.compile")
    d.tick()                      # a boundary during compilation is none
    d.called("compiled")          # nested in the compile (a call made while tracing): not a boundary either
    watch.end()
    assert d.boundaries == 1 and log == []
    d.called("compiled")          # step 1 ends: it compiled, so it is no warm-up
    d.called("compiled")          # step 2 was steady: warm-up 1
    assert log == [] and d.skipped == 1
    d.called("compiled")          # step 3 steady: warm-up 2; step 4 is the profiler's own warm-up
    assert kinds(log) == ["new", "begin"]
    d.called("compiled")
    assert kinds(log) == ["new", "begin", "step"]
    assert d.describe() == "top-level torch.compile'd function calls"
    assert d.compile_facts()["events"] == 1 and d.compile_facts()["skipped_steps"] == 1


def test_compile_inside_the_recorded_steps_restarts_the_recording_then_is_kept():
    from perflab.toolkit.steps import MAX_RESTARTS

    d, log, watch = watched_detector(warmup=0)
    d.called()
    d.called()
    assert kinds(log) == ["new", "begin", "step"]
    for i in range(MAX_RESTARTS):
        watch.start("torch.compile (cudagraph_recording)")  # a recompile, a CUDA graph recorded
        watch.end()
        d.called()
        assert kinds(log)[-3:] == ["discard", "new", "begin"] and d.restarts == i + 1
    watch.start("cuda-graph-capture")
    watch.end()
    d.called()
    assert kinds(log)[-1] == "step" and d.compile_facts()["in_recorded_steps"]


def test_a_slice_with_a_skipped_tick_is_not_steady():
    d, log, watch = watched_detector(warmup=2)
    d.tick()
    d.tick_skipped()
    d.tick()
    assert log == []
    d.tick()
    assert kinds(log) == ["new", "begin"] and d.describe() == "time slices (no top-level call seen)"


def test_graph_replays_and_modules_are_top_level_calls():
    d, log = detector()
    d.called("module")
    d.called("compiled")
    d.called("compiled")
    assert d.describe() == "top-level torch.compile'd function and nn.Module calls"
