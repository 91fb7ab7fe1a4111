"""Host-side puzzles that check on a CPU alone (requirements.gpu = false): the CPU time split, the
CPU-side doctor rules, the host analyses for questions, and the real puzzles' checks on device "cpu".

Synthetic CPU-only traces go through the real Kineto reader; the live checks run the shipped
workloads at their SMOKE_SIZE (PERFLAB_SMOKE=1) so they take seconds.
"""
from __future__ import annotations

import gzip
import json

import pytest

from perflab.analysis.idle.cpu_host import cpu_time_split, source_frame
from perflab.analysis.steps.windows import analysis_windows
from perflab.doctor.cpu import cpu_findings
from perflab.errors import PerflabError
from perflab.puzzles.engine import catalog, replay
from perflab.puzzles import questions
from perflab.trace.kineto import load

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
TID = 7


def cpu_trace(tmp_path, steps, name="slow.trace.json.gz"):
    """A CPU-only Kineto trace: per step a list of (cat, name, start, dur) relative to the step start (µs)."""
    events, t0 = [], 1_000_000.0
    for n, (length, parts) in enumerate(steps, start=1):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": TID,
                       "ts": t0, "dur": length})
        for cat, ev_name, start, dur, *tid in parts:   # an optional 5th item: another thread
            events.append({"ph": "X", "cat": cat, "name": ev_name, "pid": 1, "tid": tid[0] if tid else TID,
                           "ts": t0 + start, "dur": dur})
        t0 += length
    # after the last step (the profiler's own teardown): the steps are not cut short by the trace's end
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": TID, "ts": t0 + 5, "dur": 1})
    path = tmp_path / name
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": events}, fh)
    return path


HOST_STEP = (1000.0, [
    ("python_function", "pkg/workload.py(10): step", 0.0, 1000.0),
    ("python_function", "pkg/workload.py(20): featurize", 10.0, 600.0),
    ("python_function", "<built-in method tensor of type object at 0x1>", 610.0, 190.0),
    ("cpu_op", "aten::linear", 800.0, 150.0),
    ("cpu_op", "aten::addmm", 805.0, 140.0),
])
LOADER_STEP = (1000.0, [
    ("user_annotation", LOADER, 0.0, 700.0),
    ("cpu_op", "aten::stack", 650.0, 40.0),            # the collate, inside the loader
    ("cpu_op", "aten::conv2d", 750.0, 200.0),
])


def split_of(path):
    trace = load(path)
    return cpu_time_split(trace, analysis_windows(trace))


def test_time_split_python_ops_and_frames(tmp_path):
    s = split_of(cpu_trace(tmp_path, [HOST_STEP, HOST_STEP]))
    assert s["steps"] == 2 and s["window_us"] == pytest.approx(2000.0)
    # python: 800 µs before step 1's op; step 1's last 50 µs run on into step 2's 800 µs (one stretch
    # of 850, the steps are back to back); only step 2's last 50 µs are a short stretch (dispatch)
    assert s["pct"] == pytest.approx({"dataloader": 0.0, "comm": 0.0, "ops": 15.0, "wait": 0.0, "python": 85.0,
                                      "host": 82.5, "dispatch": 2.5})
    frames = {f["where"]: f["python_us"] for f in s["top_python_frames"]}
    # featurize's own 600 µs; the builtin's 190 µs stays with its caller (step), with step's 60 µs of its own
    assert frames == pytest.approx({"workload.py:featurize": 1200.0, "workload.py:step": 500.0})
    assert s["top_python_frames"][0]["where"] == "workload.py:featurize"


GLOO_STEP = (1000.0, [
    ("cpu_op", "aten::mm", 0.0, 300.0),
    ("user_annotation", "gloo:all_reduce", 200.0, 600.0, 99),   # on gloo's worker thread
    ("cpu_op", "aten::mm", 500.0, 100.0),                       # compute beside it: hidden comm
])


def test_time_split_comm_is_waiting_for_a_collective_on_any_thread(tmp_path):
    s = split_of(cpu_trace(tmp_path, [GLOO_STEP, GLOO_STEP, GLOO_STEP]))
    # per step: ops 400 µs; the all-reduce 200-800 minus the ops beside it (200-300, 500-600): 400 µs
    assert s["pct"]["ops"] == pytest.approx(40.0) and s["pct"]["comm"] == pytest.approx(40.0)
    assert s["pct"]["python"] == pytest.approx(20.0) and s["comm_ops"] == ["gloo:all_reduce"]
    top = cpu_findings(load(tmp_path / "slow.trace.json.gz"))[0]
    assert top.id == "comm-not-overlapped" and top.gain_pct == pytest.approx(40.0)
    assert "waits in collectives (gloo:all_reduce) 40%" in top.summary


def test_time_split_dataloader_includes_its_ops(tmp_path):
    s = split_of(cpu_trace(tmp_path, [LOADER_STEP]))
    assert s["pct"] == pytest.approx({"dataloader": 70.0, "comm": 0.0, "ops": 20.0, "wait": 0.0, "python": 10.0,
                                      "host": 0.0, "dispatch": 10.0})
    assert s["top_python_frames"] == []


def test_one_stretched_step_does_not_decide_the_verdict(tmp_path):
    busy = (1000.0, [("cpu_op", "aten::mm", 0.0, 990.0)])
    preempted = (3000.0, [("cpu_op", "aten::mm", 0.0, 990.0)])      # 2 ms of "python": the thread was off-CPU
    trace = load(cpu_trace(tmp_path, [busy, preempted, busy, busy]))
    s = cpu_time_split(trace, analysis_windows(trace))
    assert s["pct"]["host"] == pytest.approx(2010.0 / 6000.0 * 100.0)     # a third of the whole span
    assert s["typical_pct"]["host"] == pytest.approx(0.0)                  # the median step: none
    assert s["typical_pct"]["ops"] == pytest.approx(99.0)
    assert cpu_findings(trace) == []
    every = load(cpu_trace(tmp_path, [preempted] * 3, "all.json.gz"))
    assert [f.id for f in cpu_findings(every)] == ["host-compute"]


def test_source_frame_names():
    assert source_frame("/tmp/x/perflab/catalog/22-with-stack/workload.py(54): relative_distances") == \
        "workload.py:relative_distances"
    assert source_frame("C:\\w\\fix.py(3): step") == "fix.py:step"
    assert source_frame("<built-in method tensor of type object at 0x7f>") is None


def test_cpu_rules_name_the_host_side_cause(tmp_path):
    host = cpu_findings(load(cpu_trace(tmp_path, [HOST_STEP], "a.json.gz")))
    assert [(f.id, f.severity) for f in host] == [("host-compute", "high")]
    assert host[0].evidence["top_python_frames"][0] == "pkg/workload.py(20): featurize"
    loader = cpu_findings(load(cpu_trace(tmp_path, [LOADER_STEP], "b.json.gz")))
    assert [(f.id, f.severity) for f in loader] == [("input-pipeline", "high")]
    busy = cpu_findings(load(cpu_trace(tmp_path, [(1000.0, [("cpu_op", "aten::mm", 10.0, 980.0)])], "c.json.gz")))
    assert busy == []
    # many small ops with 20 µs of Python between them: dispatch overhead (40 %), not host compute
    small = [("cpu_op", "aten::add", 50.0 * i, 30.0) for i in range(20)]
    eager = load(cpu_trace(tmp_path, [(1000.0, small)], "d.json.gz"))
    assert cpu_time_split(eager, analysis_windows(eager))["pct"]["dispatch"] == pytest.approx(40.0)
    assert cpu_findings(eager) == []


def test_replay_diagnose_falls_back_to_cpu_rules_only_without_gpu(tmp_path):
    from conftest import make_trace, write_trace

    cpu = replay.diagnose(load(cpu_trace(tmp_path, [HOST_STEP])))
    assert cpu.findings[0].id == "host-compute" and "cpu_time_split" in cpu.analyses
    gpu_path = write_trace(tmp_path / "gpu.json.gz", make_trace(steps=3, kernels=[("k", 50.0)] * 4, syncs=2))
    gpu = replay.diagnose(load(gpu_path))
    assert gpu.findings and "cpu_time_split" not in gpu.analyses


def test_host_analyses_for_questions(tmp_path):
    cpu_trace(tmp_path, [HOST_STEP, HOST_STEP])
    ev = replay.Evidence(tmp_path)
    pct = questions.ANALYSES["host_time_pct"](ev, variant="slow", part="python")
    assert pct.value == pytest.approx(85.0)
    assert questions.ANALYSES["host_time_pct"](ev, part="ops").value == pytest.approx(15.0)
    with pytest.raises(PerflabError, match="part 'gpu'"):
        questions.ANALYSES["host_time_pct"](ev, part="gpu")
    culprit = questions.ANALYSES["culprit_function"](ev, variant="slow")
    assert culprit.value == "workload.py:featurize"
    q = next(q for q in catalog.find(catalog.load_catalog(), "with-stack").questions if q.key == "culprit")
    assert questions.grade(q, "featurize", culprit).correct
    assert not questions.grade(q, "workload.py", culprit).correct      # also names workload.py:step
    assert not questions.grade(q, "workload.py:step", culprit).correct


def test_culprit_needs_python_stacks(tmp_path):
    cpu_trace(tmp_path, [LOADER_STEP])
    with pytest.raises(PerflabError, match="with_stack = true"):
        questions.ANALYSES["culprit_function"](replay.Evidence(tmp_path))


# --- the shipped CPU-checkable puzzles, live on device "cpu" ------------------------------------------

CPU_PUZZLES = [p for p in catalog.load_catalog([catalog.BUILTIN]) if not p.requirements.gpu]


def test_some_puzzles_check_on_the_cpu():
    assert {"host-compute", "input-pipeline", "with-stack"} <= {p.id for p in CPU_PUZZLES}


@pytest.mark.parametrize("puzzle", CPU_PUZZLES, ids=[p.id for p in CPU_PUZZLES])
def test_cpu_check_runs_every_stage_on_the_cpu(puzzle, tmp_path, monkeypatch):
    """The whole checker on device "cpu" at SMOKE_SIZE: correct, timed with perf_counter, re-profiled."""
    pytest.importorskip("torch")
    from perflab.puzzles.engine import checker, runner

    monkeypatch.setenv("PERFLAB_SMOKE", "1")
    monkeypatch.setattr(runner, "cuda_available", lambda: False)
    assert runner.require_device(puzzle, "checking") == "cpu"
    r = checker.check(puzzle, puzzle.file("solution"), tmp_path, device="cpu", seed=11, reps=5)
    assert r.correctness.ok, r.correctness.message
    assert r.speed is not None and r.evidence is not None and r.device == "cpu"
    # an overhead check near its bar takes up to three rounds of `reps` pairs (stats.time_until_decided)
    assert r.speed.n in ((5, 10, 15) if puzzle.check.metric == "overhead" else (5,))
    ref, starter = (runner.load_module(puzzle.file(v)) for v in ("slow", "starter"))
    same = checker.check_correctness(ref, ref.setup("cpu", 3), starter, starter.setup("cpu", 3), "cpu", 3, puzzle)
    assert same.ok, same.message


# puzzles whose evidence stage is the doctor on a re-profiled trace (not a memory or overhead metric)
CPU_TIME_PUZZLES = [p for p in CPU_PUZZLES if p.check.metric == "time"]


@pytest.fixture
def one_torch_thread():
    """On a loaded 2-core machine, torch's intra-op workers compete with the step thread, which then
    sits preempted in the middle of its Python: long 'python' stretches that are the OS's, not the
    workload's. One thread keeps the split about the code; the verdict uses the median step (of 5)."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("puzzle", CPU_TIME_PUZZLES, ids=[p.id for p in CPU_TIME_PUZZLES])
def test_cpu_evidence_at_full_size_flags_the_starter_not_the_solution(puzzle, tmp_path, monkeypatch,
                                                                      one_torch_thread):
    """At the real size (what `perflab check` runs), the CPU-side rules see the planted bottleneck in
    the starter and not in the solution: the checker's evidence stage on a machine without a GPU."""
    from perflab.puzzles.engine import runner
    from perflab.puzzles.evidence import trace as trace_evidence

    monkeypatch.delenv("PERFLAB_SMOKE", raising=False)
    verdicts = {}
    for variant in ("starter", "solution"):
        module = runner.load_module(puzzle.file(variant))
        state = module.setup("cpu", 5)
        trace = tmp_path / f"{variant}.trace.json.gz"
        runner.profile_steps(module, state, "cpu", trace, warmup=1, steps=5, with_stack=puzzle.profile.with_stack)
        verdicts[variant] = trace_evidence.planted_evidence(puzzle, trace)
    assert not verdicts["starter"].ok, verdicts["starter"].found
    assert verdicts["starter"].found[0].startswith(f"{puzzle.check.planted} ("), verdicts["starter"].found
    assert verdicts["solution"].ok, verdicts["solution"].found


# --- custom-trace-rules: periodic outliers among numbered ranges ------------------------------------

def iteration_steps(n_steps=3, per_step=10, normal=100.0, slow=5000.0, every=10, at=7, first=20):
    """Steps of `per_step` iteration#N ranges; N % every == at lasts `slow` µs, the others `normal`."""
    steps, n = [], first
    for _ in range(n_steps):
        parts, t = [], 0.0
        for _ in range(per_step):
            dur = slow if n % every == at else normal
            parts.append(("user_annotation", f"iteration#{n}", t, dur))
            parts.append(("cpu_op", "aten::linear", t + 5.0, 20.0))
            t += dur + 10.0
            n += 1
        steps.append((t, parts))
    return steps


def test_periodic_outliers_find_period_phase_and_extra_time(tmp_path):
    from perflab.analysis.steps.annotations import annotation_outliers

    trace = load(cpu_trace(tmp_path, iteration_steps()))
    found = annotation_outliers(trace, factor=10.0, windows=analysis_windows(trace))
    assert found["outliers"] == [27, 37, 47] and found["ranges"] == 30
    assert (found["period"], found["phase"]) == (10, 7)
    assert found["extra_us"] == pytest.approx(4900.0)
    none = annotation_outliers(load(cpu_trace(tmp_path, iteration_steps(slow=100.0), "flat.json.gz")))
    assert none["outliers"] == [] and none["period"] == 0
    every4 = annotation_outliers(load(cpu_trace(tmp_path, iteration_steps(every=4, at=1), "e4.json.gz")))
    assert (every4["period"], every4["phase"]) == (4, 1)


def test_periodic_outliers_question_and_its_errors(tmp_path):
    cpu_trace(tmp_path, iteration_steps())
    ev = replay.Evidence(tmp_path)
    puzzle = catalog.find(catalog.load_catalog(), "custom-trace-rules")
    for key, expected in (("period", 10), ("phase", 7), ("extra_ms", 4.9)):
        q = puzzle.find_question(key)
        got = questions.compute(q, ev)
        assert got.value == pytest.approx(expected), key
        assert questions.grade(q, str(expected), got).correct
    assert not questions.grade(puzzle.find_question("phase"), "6", questions.compute(puzzle.find_question("phase"),
                                                                                        ev)).correct
    with pytest.raises(PerflabError, match="stat 'mean'"):
        questions.ANALYSES["periodic_outliers"](ev, stat="mean")
    with pytest.raises(PerflabError, match="lasts 50x its median"):
        questions.ANALYSES["periodic_outliers"](ev, factor=50.0)


def _readme_blocks(puzzle_id):
    import re

    text = (catalog.find(catalog.load_catalog(), puzzle_id).folder / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_rule_runs_and_finds_the_pattern(tmp_path, capsys):
    path = cpu_trace(tmp_path, iteration_steps())
    rule = _readme_blocks("custom-trace-rules")[0].replace("artifacts/slow.trace.json.gz", str(path))
    scope = {}
    exec(compile(rule, "README.md", "exec"), scope)
    assert scope["slow"] == [27, 37, 47] and scope["typical_us"] == pytest.approx(100.0)


def test_readme_duckdb_rule_runs(tmp_path, capsys):
    pytest.importorskip("duckdb")
    pytest.importorskip("pandas")
    path = cpu_trace(tmp_path, iteration_steps())
    sql = _readme_blocks("custom-trace-rules")[1].replace("artifacts/slow.trace.json.gz", str(path))
    exec(compile(sql, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert all(str(n) in out for n in (27, 37, 47)) and "5000" in out and " 28 " not in out


def test_custom_trace_rules_variants_agree_on_the_cpu(monkeypatch):
    """gpu = true (the fix is checked on a GPU), but its three files run and agree on device "cpu"."""
    pytest.importorskip("torch")
    from perflab.puzzles.engine import checker, runner

    monkeypatch.setenv("PERFLAB_SMOKE", "1")
    puzzle = catalog.find(catalog.load_catalog(), "custom-trace-rules")
    ref = runner.load_module(puzzle.file("slow"))
    for variant in ("solution", "starter"):
        fix = runner.load_module(puzzle.file(variant))
        # 3 steps of 10 iterations: the audit (N % 10 == 7) fires in each; checked_outputs runs 2
        same = checker.check_correctness(ref, ref.setup("cpu", 2), fix, fix.setup("cpu", 2), "cpu", 2, puzzle)
        assert same.ok, (variant, same.message)
    state = ref.setup("cpu", 2)
    _scores, audit = ref.step(state)
    assert float(audit) > 0 and state["n"] == 10
