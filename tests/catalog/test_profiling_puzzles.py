"""pyspy-sampling, profiler-overhead, memory-timeline, before-after: the readers and analyses behind
them (speedscope profiles, the profiler table, the memory peak, the before/after diff), the in-process
profilers, the overhead check's logic, and the shipped recordings' questions.

No timing bars: the overhead check is driven by fake clocks here; the measured numbers live in the
recordings made on the GPU machine.
"""
from __future__ import annotations

import gzip
import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import shipped_file

from perflab.analysis.steps.sampling import hot_functions
from perflab.errors import PerflabError, UnreadableInput
from perflab.puzzles.engine import catalog, replay
from perflab.puzzles import questions
from perflab.trace import speedscope

CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"


def puzzle(pid):
    return catalog.find(catalog.load_catalog([catalog.BUILTIN]), pid)


def grade(p, key, answer, ev):
    q = p.find_question(key)
    return questions.grade(q, str(answer), questions.compute(q, ev))


# ---- speedscope / raw py-spy profiles -----------------------------------------------------------

FRAMES = [{"name": "<module>", "file": "/x/loop_target.py", "line": 1},
          {"name": "sampled_steps", "file": "/x/loop_target.py", "line": 30},
          {"name": "step", "file": "/w/workload.py", "line": 5},
          {"name": "hash_ids", "file": "/w/workload.py", "line": 20},
          {"name": "hash_ids", "file": "/w/workload.py", "line": 21},   # another line, same function
          {"name": "score", "file": "/w/workload.py", "line": 40},
          {"name": "setup", "file": "/w/workload.py", "line": 60}]


def speedscope_doc(samples, weights=None):
    return {"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {"frames": FRAMES},
            "profiles": [{"type": "sampled", "name": "MainThread", "unit": "seconds", "startValue": 0,
                          "endValue": 1, "samples": samples, "weights": weights or [0.01] * len(samples)},
                         {"type": "evented", "name": "ignored", "events": []}],
            "exporter": "py-spy@0.4.3"}


LOOP = [0, 1, 2]
SAMPLES = [LOOP + [3]] * 5 + [LOOP + [4]] * 3 + [LOOP + [5]] * 2 + [LOOP] * 2 + [[0, 6]] * 9


def write_profile(path, doc):
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(doc, fh)
    return path


def test_speedscope_self_and_total_shares_within_the_loop(tmp_path):
    prof = speedscope.load(write_profile(tmp_path / "p.json.gz", speedscope_doc(SAMPLES)))
    assert prof.frames[3].label() == "workload.py:hash_ids" and len(prof.threads) == 1
    hot = hot_functions(prof, within="sampled_steps")
    assert hot["samples"] == 21 and hot["kept_pct"] == pytest.approx(100 * 12 / 21, abs=0.01)  # setup drops out
    rows = {r["function"]: r for r in hot["functions"]}
    assert rows["workload.py:hash_ids"]["self_pct"] == pytest.approx(100 * 8 / 12, abs=0.01)  # two lines, one function
    assert rows["workload.py:score"]["self_pct"] == pytest.approx(100 * 2 / 12, abs=0.01)
    assert rows["workload.py:step"]["self_pct"] == pytest.approx(100 * 2 / 12, abs=0.01)
    total = {r["function"]: r["total_pct"] for r in hot["by_total"]}
    assert total["workload.py:step"] == pytest.approx(100.0) and total["workload.py:hash_ids"] == pytest.approx(66.67, abs=0.01)
    assert hot_functions(prof)["functions"][0]["function"] == "workload.py:setup"  # the whole process


def test_raw_collapsed_stacks_read_the_same(tmp_path):
    raw = tmp_path / "p.txt"
    raw.write_text(textwrap.dedent("""\
        process 1:"python x";thread (0x1);<module> (loop_target.py:1);sampled_steps (loop_target.py:30);step (workload.py:5);hash_ids (workload.py:20) 6
        process 1:"python x";thread (0x1);<module> (loop_target.py:1);sampled_steps (loop_target.py:30);step (workload.py:5);score (workload.py:40) 2
        a frame name with a line break
         in it 3
        process 1:"python x";thread (0x1);<module> (loop_target.py:1);setup (workload.py:60) 9
        """))
    prof = speedscope.load(raw)
    assert prof.meta["format"] == "raw" and prof.meta["skipped_lines"] == 1
    hot = hot_functions(prof, within="sampled_steps")
    assert [(r["function"], r["self_pct"]) for r in hot["functions"]] == [("workload.py:hash_ids", 75.0),
                                                                         ("workload.py:score", 25.0)]


@pytest.mark.parametrize("content, message", [
    (b"{not json", "invalid JSON"),
    (json.dumps({"shared": {}, "profiles": []}).encode(), "shared.frames"),
    (json.dumps(speedscope_doc([[0, 99]])).encode(), "does not exist"),
    (json.dumps(speedscope_doc([[0]], weights=[1, 2])).encode(), "same length"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b"no counts here\n", "no line"),
])
def test_bad_profiles_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(UnreadableInput, match=message) as err:
        speedscope.load(path)
    assert "\n" not in str(err.value)


# ---- in-process profilers ------------------------------------------------------------------------

def _hot(n=300_000):
    s = 0
    for i in range(n):
        s = (s * 31 + i) & 0xFFFFFFFF
    return s


def _cold(n=20_000):
    s = 0
    for i in range(n):
        s += i
    return s


def _with_builtins(n=200_000):
    return sorted(range(n, 0, -1))[:3]


def test_sampler_and_tracing_profile_name_the_hot_function():
    from perflab.toolkit.sampling import Sampler, TracingProfile, frame_label

    expected = frame_label(__file__, "_hot")
    for clock in ("wall", "cpu"):
        with Sampler(0.001, clock=clock) as s:
            for _ in range(3):
                _hot()
                _cold()
        assert s.samples > 0 and s.hottest() == expected, (clock, s.counts)
        assert sum(s.shares().values()) == pytest.approx(1.0)
    with TracingProfile() as t:
        _hot()
        _cold()
    assert t.hottest() == expected
    with TracingProfile() as t:   # the builtin sorted()'s time is its caller's own time
        _with_builtins()
    assert t.hottest() == frame_label(__file__, "_with_builtins")
    with pytest.raises(ValueError):
        Sampler(0.0)
    with pytest.raises(ValueError):
        Sampler(0.01, clock="gpu")


HOT_TARGET = '''
def setup(device, seed):
    return {"n": 0}

def hot(state):
    s = 0
    for i in range(60_000):
        s = (s * 31 + i) & 0xFFFFFFFF
    return s

def step(state):
    state["n"] += 1
    return hot(state)
'''


def test_loop_target_times_rounds_and_names_the_hot_function(tmp_path):
    from perflab.puzzles.evidence import loop_target

    target = tmp_path / "target.py"
    target.write_text(HOT_TARGET)
    out = tmp_path / "r.json"
    rc = loop_target.main([str(target), "--device", "cpu", "--warmup", "1", "--steps", "3", "--rounds", "2",
                           "--inproc", "none,cprofile,sampler", "--result", str(out)])
    data = json.loads(out.read_text())
    assert rc == 0 and data["kinds"] == ["none", "cprofile", "sampler"]
    assert all(len(v) == 2 for v in data["rounds_ms"].values()) and len(data["times_ms"]["none"]) == 6
    assert data["hottest"]["cprofile"] == "target.py:hot" and data["hottest"]["none"] == ""
    with pytest.raises(SystemExit):
        loop_target.main([str(target), "--inproc", "gdb"])


def test_profiler_table_records_what_runs_and_says_what_does_not(tmp_path, monkeypatch):
    from perflab.puzzles.evidence import overhead

    target = tmp_path / "target.py"
    target.write_text(HOT_TARGET)
    monkeypatch.setattr(overhead, "ROUNDS", 2)
    monkeypatch.setattr(overhead, "STEPS_PER_ROUND", 2)
    monkeypatch.setattr(overhead.shutil, "which", lambda name: None)          # no py-spy here
    monkeypatch.setattr(overhead, "_available", lambda m: False)              # nor yappi, pyinstrument, Scalene
    table = json.loads(overhead.record_table(target, tmp_path / "t", "cpu").read_text())
    rows = {r["profiler"]: r for r in table["rows"]}
    assert table["schema"] == "perflab.profilers/1" and table["rounds"] == 2
    base = rows["baseline (in-process)"]
    assert base["status"] == "ok" and base["factor"] == 1.0 and len(base["rounds_ms"]) == 2
    assert rows["cProfile"]["status"] == "ok" and rows["cProfile"]["hottest"] == "target.py:hot"
    assert rows["cProfile"]["factor"] == pytest.approx(rows["cProfile"]["median_ms"] / base["median_ms"], rel=1e-3)
    assert rows["yappi (cpu clock, builtins)"]["status"] == "not installed (yappi)"
    assert rows["py-spy --rate 100"]["status"] == "not installed (py-spy)" and "factor" not in rows["py-spy --rate 100"]
    assert rows["baseline (own process)"]["status"] == "ok"


# ---- the overhead check (fake clocks) ------------------------------------------------------------

def _fake_modules(fix_name=lambda i: "w.py:hot"):
    calls = {"n": 0}

    def fix_step(state):
        calls["n"] += 1
        return 1.0, fix_name(calls["n"])

    ref = SimpleNamespace(bare_step=lambda s: 1.0, step=lambda s: (1.0, "w.py:hot"))
    return ref, SimpleNamespace(step=fix_step)


@pytest.mark.parametrize("fix_ms, passes", [(10.2, True), (13.0, False)])
def test_overhead_check_passes_only_under_the_bar(monkeypatch, fix_ms, passes):
    from perflab.puzzles.engine import checker

    from perflab.puzzles.evidence import overhead
    ref, fix = _fake_modules()

    def fake_sampler(step, state, device, inner=1):
        return lambda: 10.0 if step is ref.bare_step else fix_ms
    monkeypatch.setattr(overhead.runner, "sampler", fake_sampler)
    p = puzzle("profiler-overhead")
    result = checker.CheckResult(p.id, "fix.py", "cpu", checker.Correctness(True, 1))
    r = overhead.check_overhead(p, ref, {}, fix, {}, result, device="cpu", reps=8)
    assert r.speed.point == pytest.approx(10.0 / fix_ms) and r.speed.bar == pytest.approx(1 / 1.10)
    assert r.speed.passed is passes and r.evidence.ok and r.passed is passes
    assert r.slow["median_ms"] == 10.0 and "bare_step" in r.slow["what"]


def test_overhead_check_wants_the_same_hot_spot_every_time(monkeypatch):
    from perflab.puzzles.engine import checker

    from perflab.puzzles.evidence import overhead
    ref, fix = _fake_modules(lambda i: "w.py:hot" if i % 3 else "w.py:other")
    monkeypatch.setattr(overhead.runner, "sampler", lambda step, state, device, inner=1: (lambda: 10.0))
    p = puzzle("profiler-overhead")
    result = checker.CheckResult(p.id, "fix.py", "cpu", checker.Correctness(True, 1))
    r = overhead.check_overhead(p, ref, {}, fix, {}, result, device="cpu", reps=6)
    assert r.speed.passed and not r.evidence.ok and not r.passed
    assert "w.py:other" in r.evidence.found[1]


# ---- the profiler table's questions --------------------------------------------------------------

TABLE = {"schema": "perflab.profilers/1", "rows": [
    {"profiler": "baseline (in-process)", "kind": "none", "status": "ok", "median_ms": 20.0, "factor": 1.0,
     "overhead_pct": 0.0, "spread_pct": 2.0, "rounds_ms": [20.0]},
    {"profiler": "cProfile", "kind": "tracing", "status": "ok", "median_ms": 34.0, "factor": 1.7,
     "overhead_pct": 70.0, "spread_pct": 3.0, "rounds_ms": [34.0]},
    {"profiler": "yappi (cpu clock, builtins)", "kind": "tracing", "status": "ok", "median_ms": 108.0,
     "factor": 5.4, "overhead_pct": 440.0, "spread_pct": 3.0, "rounds_ms": [108.0]},
    {"profiler": "py-spy --rate 100", "kind": "sampling", "status": "ok", "median_ms": 21.0, "factor": 1.05,
     "overhead_pct": 5.0, "spread_pct": 3.0, "rounds_ms": [21.0]},
    {"profiler": "py-spy --rate 100 --nonblocking", "kind": "sampling", "status": "ok", "median_ms": 20.2,
     "factor": 1.01, "overhead_pct": 1.0, "spread_pct": 3.0, "rounds_ms": [20.2]},
    {"profiler": "Scalene --cpu-only", "kind": "sampling", "status": "failed (exit 1): no signals"},
]}


def test_profiler_table_questions(tmp_path):
    (tmp_path / "profilers.json").write_text(json.dumps(TABLE))
    ev = replay.Evidence(tmp_path)
    p = puzzle("profiler-overhead")
    assert questions.compute(p.find_question("most"), ev).value == "yappi (cpu clock, builtins)"
    assert grade(p, "most", "yappi", ev).correct and not grade(p, "most", "cProfile", ev).correct
    assert grade(p, "most_factor", "5.4", ev).correct and not grade(p, "most_factor", "15", ev).correct
    assert grade(p, "cprofile_factor", "1.7x", ev).correct
    assert grade(p, "least_kind", "sampling", ev).correct and not grade(p, "least_kind", "tracing", ev).correct
    assert questions.compute(p.find_question("pyspy_factor"), ev).value == 1.05   # exact name, not the --nonblocking row
    computed = questions.compute(p.find_question("most"), ev)
    assert computed.evidence["Scalene --cpu-only"].startswith("failed")
    with pytest.raises(PerflabError, match="no measured row"):
        questions.ANALYSES["profiler_factor"](ev, profiler="Scalene")
    with pytest.raises(PerflabError, match="no profilers.json"):
        questions.ANALYSES["profiler_extreme"](replay.Evidence(tmp_path / "nothing"))


# ---- the before/after diff's questions -----------------------------------------------------------

def test_diff_questions_name_what_appeared_and_disappeared(tmp_path):
    from conftest import make_trace, write_trace

    write_trace(tmp_path / "before.trace.json.gz", make_trace(steps=4, kernels=[("elementwise_kernel", 20.0)] * 30))
    write_trace(tmp_path / "slow.trace.json.gz", make_trace(steps=4, kernels=[("elementwise_kernel", 20.0)] * 5,
                                                            syncs=3))
    ev = replay.Evidence(tmp_path)
    p = puzzle("before-after")
    assert grade(p, "appeared", "host-sync", ev).correct and not grade(p, "appeared", "memcpy", ev).correct
    gpu = questions.compute(p.find_question("gpu_time_change_pct"), ev)
    assert gpu.value == pytest.approx(100.0 * (5 - 30) / 30, abs=0.5)
    assert questions.compute(p.find_question("syncs_after"), ev).value == pytest.approx(3.0)
    back = questions.ANALYSES["diff_finding"](ev, status="disappeared", before="slow", after="before")
    assert back.value == "host-sync"
    with pytest.raises(PerflabError, match="no finding disappeared"):
        questions.ANALYSES["diff_finding"](ev, status="disappeared")
    with pytest.raises(PerflabError, match="has no metric"):
        questions.ANALYSES["diff_metric"](ev, metric="joules")


# ---- memory: what is alive at the peak -----------------------------------------------------------

def _frames(fn, line=1, file="/srv/model.py"):
    return [{"filename": "/usr/lib/python3/site-packages/torch/nn/functional.py", "line": 9, "name": "linear"},
            {"filename": file, "line": line, "name": fn}]


def peak_snapshot():
    MB = 1 << 20
    ev = []
    ev += [{"action": "alloc", "addr": 0x1000 + i, "size": 8 * MB, "stream": 0, "frames": _frames("load")}
           for i in range(2)]                                   # weights: 16 MB, stay
    ev += [{"action": "alloc", "addr": 0x2000 + i, "size": 32 * MB, "stream": 0, "frames": _frames("block", 5)}
           for i in range(3)]                                   # activations: 96 MB at the peak
    ev += [{"action": "free_completed", "addr": 0x2000 + i, "size": 32 * MB, "stream": 0, "frames": []}
           for i in range(3)]
    ev += [{"action": "alloc", "addr": 0x3000, "size": 4 * MB, "stream": 0, "frames": _frames("head", 7)}]
    seg_blocks = [{"address": 0x1000 + i, "size": 8 * MB, "requested_size": 8 * MB, "state": "active_allocated",
                   "frames": []} for i in range(2)]
    seg_blocks.append({"address": 0x3000, "size": 4 * MB, "requested_size": 4 * MB, "state": "active_allocated",
                       "frames": []})
    seg_blocks.append({"address": 0x4000, "size": 96 * MB, "requested_size": 0, "state": "inactive", "frames": []})
    return {"segments": [{"device": 0, "address": 0x1000, "total_size": 116 * MB, "stream": 0,
                          "segment_type": "large", "segment_pool_id": [0, 0], "is_expandable": False,
                          "blocks": seg_blocks}],
            "device_traces": [ev]}


def test_live_at_peak_groups_by_the_allocating_function(tmp_path):
    from perflab.analysis.gpu_memory.memory_peak import function_of, live_at_peak
    from perflab.trace.snapshot import Frame, from_raw

    peak = live_at_peak(from_raw(peak_snapshot()))
    assert peak["peak_allocated_mb"] == pytest.approx(112.0)
    rows = {r["function"]: r for r in peak["by_function"]}
    assert peak["by_function"][0]["function"] == "model.py:block"
    assert rows["model.py:block"]["mb"] == pytest.approx(96.0) and rows["model.py:block"]["blocks"] == 3
    assert rows["model.py:load"]["mb"] == pytest.approx(16.0) and "model.py:head" not in rows
    assert function_of([Frame("/a/b/w.py", 3, "fwd")]) == "w.py:fwd"
    assert function_of([]) == "(no stack recorded)"


# ---- the shipped recordings ---------------------------------------------------------------------

def recorded(pid):
    p = puzzle(pid)
    if not (p.artifacts / "measurements.json").is_file():
        pytest.skip(f"{pid} has no recording yet (python3 scripts/record.py puzzle {pid} on the GPU machine)")
    return p, replay.recording(p)


def test_pyspy_recording_names_hash_ids_and_the_doctor_host_compute():
    p, ev = recorded("pyspy-sampling")
    assert ev.manifest()["device"] == "cuda" and ev.manifest()["gpu"]
    hot = questions.compute(p.find_question("hot_function"), ev)
    assert hot.value == "workload.py:hash_ids"
    assert grade(p, "hot_function", "hash_ids", ev).correct
    assert not grade(p, "hot_function", "workload.py:build_inputs", ev).correct
    assert not grade(p, "hot_function", "workload.py", ev).correct          # names several functions
    share = questions.compute(p.find_question("self_pct"), ev).value
    assert 30.0 < share < 100.0 and grade(p, "self_pct", f"{share:.1f}", ev).correct
    assert not grade(p, "self_pct", f"{share * 1.5:.1f}", ev).correct
    assert grade(p, "cause", "host-compute", ev).correct and not grade(p, "cause", "launch-overhead", ev).correct
    m = ev.measurements()
    assert m["check"]["solution"]["passed"] and not m["check"]["starter"]["passed"]
    assert m["speedup"]["ci_low"] >= p.check.speedup


def test_memory_timeline_recording_peak_owner_and_doctor():
    p, ev = recorded("memory-timeline")
    assert grade(p, "cause", "memory-capacity", ev).correct
    assert grade(p, "owner", "workload.py:block", ev).correct
    assert not grade(p, "owner", "workload.py:param", ev).correct
    peak = questions.compute(p.find_question("peak_mb"), ev).value
    assert peak > 1000 and grade(p, "peak_mb", f"{peak:.0f}", ev).correct
    assert not grade(p, "peak_mb", f"{peak / 4:.0f}", ev).correct
    pct = questions.compute(p.find_question("owner_pct"), ev).value
    assert 50.0 < pct <= 100.0
    m = ev.measurements()
    assert m["speedup"]["point"] >= p.check.reduction and not m["check"]["starter"]["passed"]
    from perflab.doctor.memory import diagnose_memory

    assert diagnose_memory(p.artifacts / "solution.memory.json.gz").findings[0].id == "healthy"


# ---- the variants on the CPU ---------------------------------------------------------------------

torch = pytest.importorskip("torch")


def load(folder, name):
    from perflab.puzzles.engine.runner import load_module

    return load_module(shipped_file(CATALOG / folder, name))


def test_pyspy_solution_hash_is_bit_identical():
    w, s = load("24-pyspy-sampling", "workload"), load("24-pyspy-sampling", "solution")
    rng = __import__("numpy").random.default_rng(3)
    ids = rng.integers(0, 2**62, size=(7, 33), dtype="int64")
    expected = w.hash_ids(ids, 65536)
    got = s.hash_tensor(torch.from_numpy(ids), 65536)
    assert got.tolist() == expected


@pytest.mark.parametrize("folder, names", [
    ("24-pyspy-sampling", ("workload", "starter", "solution")),
    ("26-memory-timeline", ("workload", "starter", "solution")),
    ("27-before-after", ("workload", "starter", "solution")),
])
def test_variants_agree_on_the_cpu(folder, names, monkeypatch):
    monkeypatch.setenv("PERFLAB_SMOKE", "1")
    outs = []
    for name in names:
        m = load(folder, name)
        outs.append(m.step(m.setup("cpu", 4)).detach())
    for got in outs[1:]:
        torch.testing.assert_close(got, outs[0], rtol=1e-4, atol=1e-5)


def test_before_after_guard_still_fails_a_blow_up():
    for name in ("workload", "solution"):
        m = load("27-before-after", name)
        state = m.setup("cpu", 1)
        state["weights"][1][0, 0] = float("inf")
        with pytest.raises((RuntimeError, FloatingPointError)):
            m.step(state)
    before = load("27-before-after", "before")
    torch.testing.assert_close(before.step(before.setup("cpu", 1)), load("27-before-after", "workload").step(
        load("27-before-after", "workload").setup("cpu", 1)), rtol=1e-4, atol=1e-5)


def test_memory_timeline_solution_keeps_no_graph():
    m = load("26-memory-timeline", "solution")
    assert not m.step(m.setup("cpu", 0)).requires_grad
    slow = load("26-memory-timeline", "workload")
    assert slow.step(slow.setup("cpu", 0)).requires_grad   # the planted cause: autograd records the graph


def test_profiler_overhead_variants_report_the_same_hot_spot():
    """Full size on the CPU (the puzzle ignores the smoke size: a profile needs work to sample)."""
    names = {}
    for name in ("workload", "solution"):
        m = load("25-profiler-overhead", name)
        state = m.setup("cpu", 2)
        scores, names[name] = m.step(state)
        torch.testing.assert_close(scores, m.bare_step(m.setup("cpu", 2)))
    assert names == {"workload": "workload.py:hash_ids", "solution": "workload.py:hash_ids"}
