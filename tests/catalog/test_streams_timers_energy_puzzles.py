"""Catalog 15-17 and 30: streams-concurrency, nvtx-streams, honest-timers, energy-precision.

Their analyses on synthetic traces and records (kernel concurrency and SM fill, annotated ranges against
the GPU work they launched, the part timers, the energy figures), the serialized-kernels rule, the
[timers] / [energy] tables of puzzle.toml, the workloads on the CPU at SMOKE_SIZE, and every question
replayed from the H100 recordings: the computed answer graded right, a wrong one graded wrong.
"""
from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import re
import sys
from pathlib import Path

import pytest
from conftest import assert_sized_for_the_device, shipped_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from perflab.analysis.idle.concurrency import kernel_concurrency, levels, time_at_levels
from perflab.analysis.steps.ranges import stage_times
from perflab.analysis.steps.windows import analysis_windows
from perflab.doctor import diagnose
from perflab.errors import PerflabError
from perflab.puzzles.engine import catalog, replay
from perflab.puzzles.evidence import energy as energy_evidence, timers as timers_evidence
from perflab.puzzles import questions
from perflab.puzzles.engine.spec import SpecError, parse
from perflab.trace.kineto import load
from perflab.trace.builders.synthetic import TraceBuilder

CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"
PUZZLES = {
    "streams-concurrency": "15-streams-concurrency",
    "nvtx-streams": "16-nvtx-streams",
    "honest-timers": "17-honest-timers",
    "energy-precision": "30-energy-precision",
}
GEMM = "expert_gemm_kernel"
_ids = itertools.count()


def experts_trace(tmp_path, streams: int, kernel_us: float = 100.0, grid=(1, 16, 1), steps: int = 3):
    """16 independent 16-block kernels per step, issued on 1 stream or round-robin on `streams` streams."""
    b = TraceBuilder()
    for n in range(1, steps + 1):
        with b.step(n):
            for e in range(16):
                stream = 7 if streams == 1 else 20 + e % streams
                b.op("expert", [(GEMM, kernel_us, grid, (256, 1, 1))], cpu_us=10, stream=stream)
            b.synchronize()
    return load(b.write(tmp_path / f"experts-{streams}-{kernel_us}-{next(_ids)}.json.gz"))


# ------------------------------------------------------------------------------------ concurrency

def test_levels_count_overlapping_intervals_and_touching_ones_do_not_overlap():
    lv = time_at_levels([0, 5, 10, 30], [10, 20, 30, 40])     # [0,10) [5,20) [10,30) [30,40)
    assert lv == {1: 25.0, 2: 15.0}                             # 0-5, 20-40 alone; 5-20 two at once
    s, e, k = levels([0, 10], [10, 20])                         # back to back: never two
    assert k.max() == 1 and time_at_levels([0, 10], [10, 20]) == {1: 20.0}
    assert time_at_levels([], []) == {}


def test_serialized_kernels_fill_a_fraction_and_never_overlap(tmp_path):
    t = experts_trace(tmp_path, streams=1)
    c = kernel_concurrency(t, analysis_windows(t))
    assert c["sms"] == 132 and c["kernels"] == 48
    assert c["fill_pct"] == pytest.approx(100 * 16 / 132)
    assert c["concurrent_pct"] == 0.0 and c["max_concurrent"] == 1 and c["mean_concurrency"] == pytest.approx(1.0)
    assert [s["stream"] for s in c["streams"]] == [7] and c["streams"][0]["busy_pct"] > 95
    u = c["underfilled"]
    assert u["count"] == 48 and u["time_us"] == pytest.approx(4800) and u["alone_us"] == pytest.approx(4800)
    assert u["idle_sm_us"] == pytest.approx(4800 * (1 - 16 / 132)) and u["grids"] == [16] and u["names"] == [GEMM]


def test_streams_run_them_side_by_side(tmp_path):
    t = experts_trace(tmp_path, streams=8)
    c = kernel_concurrency(t, analysis_windows(t))
    assert len(c["streams"]) == 8 and c["max_concurrent"] >= 5 and c["concurrent_pct"] > 80
    assert c["underfilled"]["alone_us"] < 0.05 * c["underfilled"]["time_us"]
    assert sum(c["level_us"].values()) == pytest.approx(c["busy_us"])


def test_the_doctor_names_serialized_kernels_and_not_their_concurrent_fix(tmp_path):
    slow = diagnose(experts_trace(tmp_path, streams=1))
    top = slow.findings[0]
    assert top.id == "serialized-kernels" and top.severity == "high" and top.level == "system"
    assert top.evidence["blocks"] == [16] and top.evidence["sms"] == 132 and top.evidence["concurrent_pct"] == 0.0
    assert top.gain_pct == pytest.approx(100 * (1 - 16 / 132), rel=0.05) and top.events
    fixed = {f.id: f.severity for f in diagnose(experts_trace(tmp_path, streams=8)).findings}
    assert fixed.get("serialized-kernels") not in ("high", "medium")


@pytest.mark.parametrize("kernel_us, grid", [(4.0, (1, 16, 1)), (100.0, (1, 132, 1)), (100.0, (2, 66, 1))])
def test_short_or_full_kernels_are_not_serialized_kernels(tmp_path, kernel_us, grid):
    """Tiny kernels are launch overhead (streams cannot help); kernels with a block per SM fill the GPU."""
    ids = [f.id for f in diagnose(experts_trace(tmp_path, streams=1, kernel_us=kernel_us, grid=grid)).findings]
    assert "serialized-kernels" not in ids


def test_no_sm_count_no_fill(tmp_path):
    t = experts_trace(tmp_path, streams=1)
    t.meta["device_properties"] = []
    c = kernel_concurrency(t, analysis_windows(t))
    assert c["sms"] is None and c["fill_pct"] is None and c["underfilled"]["count"] == 0


# ------------------------------------------------------------------------------------ ranges

def staged_trace(tmp_path):
    """preprocess enqueues 4 long kernels; postprocess enqueues a tiny one and then waits (.item())."""
    b = TraceBuilder()
    for n in range(1, 3):
        with b.step(n):
            with b.span("preprocess", cat="user_annotation"):
                for _ in range(4):
                    b.op("aten::mul", [("vectorized_elementwise_kernel", 200.0, (4096, 1, 1))], cpu_us=8)
            with b.span("postprocess", cat="user_annotation"):
                b.op("aten::topk", [("gatherTopK", 5.0, (64, 1, 1))], cpu_us=8)
                b.item()
    return load(b.write(tmp_path / "staged.json.gz"))


def test_a_range_measures_the_host_and_its_kernels_measure_the_gpu(tmp_path):
    t = staged_trace(tmp_path)
    stages = {s["name"]: s for s in stage_times(t, analysis_windows(t))["stages"]}
    assert list(stages) == ["preprocess", "postprocess"]          # ProfilerStep#N is not a stage
    pre, post = stages["preprocess"], stages["postprocess"]
    assert pre["count"] == post["count"] == 2
    assert pre["gpu_ms_per_step"] == pytest.approx(0.8) and pre["ops"] == 8
    assert pre["cpu_ms_per_step"] < 0.1                             # 4 launches: tens of µs
    assert post["gpu_ms_per_step"] == pytest.approx((5.0 + 1.5) / 1e3)   # the top-k and the 4-byte copy
    assert post["cpu_ms_per_step"] > 0.75                           # it waits for preprocess's kernels
    assert pre["gpu_span_us"] >= pre["gpu_busy_us"] == pytest.approx(1600)
    only = stage_times(t, analysis_windows(t), ["postprocess"])["stages"]
    assert [s["name"] for s in only] == ["postprocess"]


# ------------------------------------------------------------------------------------ timers / energy

def test_timers_measure_on_the_cpu_has_host_clocks_only():
    calls = []
    parts = [("a", lambda s: calls.append("a")), ("b", lambda s: calls.append("b"))]
    data = timers_evidence.measure(parts, {}, "cpu", steps=4, warmup=1)
    assert data["schema"] == "perflab.timers/1" and data["parts"] == ["a", "b"]
    assert set(data["methods"]) == {"host", "host_sync"}
    assert calls == ["a", "b"] * (1 + 4 + 4)                      # in order, every step, both methods
    for m in data["methods"].values():
        assert len(m["parts"]["a"]["samples_ms"]) == 4 and m["step"]["median_ms"] >= 0


def test_timers_name_the_missing_part_function():
    class Module:
        encode = staticmethod(lambda s: None)

    with pytest.raises(PerflabError, match="no part function select"):
        timers_evidence.part_functions(Module, ("encode", "select"), Path("fix.py"))


def fake_timers(tmp_path, variant="slow"):
    def part(host, sync, ev):
        return {"host": host, "host_sync": sync, "events": ev}

    table = {"encode": part(0.2, 5.4, 5.5), "select": part(0.1, 0.3, 0.2), "postprocess": part(5.7, 0.5, 0.4)}
    methods = {}
    for m in ("host", "host_sync", "events"):
        methods[m] = {"parts": {p: {"median_ms": v[m], "samples_ms": [v[m]]} for p, v in table.items()},
                      "step": {"median_ms": sum(v[m] for v in table.values())}}
    data = {"schema": "perflab.timers/1", "device": "cuda", "steps": 1, "parts": list(table), "methods": methods}
    (tmp_path / f"{variant}.timers.json").write_text(json.dumps(data))
    return replay.Evidence(tmp_path)


def test_timer_analyses(tmp_path):
    ev = fake_timers(tmp_path)
    A = questions.ANALYSES
    assert A["timer_value"](ev, part="encode", method="host").value == 0.2
    assert A["timer_value"](ev, part="encode", method="events").value == 5.5
    assert A["timer_value"](ev, method="events").value == pytest.approx(6.1)
    assert A["timer_top_part"](ev, method="host").value == "postprocess"
    assert A["timer_top_part"](ev, method="events").value == "encode"
    assert A["timer_ratio"](ev, part="encode").value == pytest.approx(27.5)
    with pytest.raises(PerflabError, match="method"):
        A["timer_value"](ev, part="encode", method="wallclock")
    with pytest.raises(PerflabError, match="no part 'decode'"):
        A["timer_value"](ev, part="decode")
    # names the missing file and what a user can run (no repository script)
    with pytest.raises(PerflabError, match=r"no solution\.timers\.json .*`perflab run ID`"):
        A["timer_value"](ev, variant="solution")


def fake_energy(tmp_path, variant, joules, seconds, watts):
    result = {"joules_per_call": joules, "mean_power_w": watts, "seconds_per_call": seconds, "calls": 100,
              "flops_per_call": 5.5e11, "flop_per_joule": 5.5e11 / joules}
    data = {"schema": energy_evidence.SCHEMA, "device": "H100", "power_source": "instant", "items_per_call": 4096,
            "energy": result, **energy_evidence.derived(result, 4096),
            "monitor": {"interval_s": 0.02, "summary": {"samples": 10, "mean_power_w": watts}, "samples": []}}
    (tmp_path / f"{variant}.energy.json").write_text(json.dumps(data))


def test_energy_analyses(tmp_path):
    fake_energy(tmp_path, "slow", 6.8, 0.0107, 630.0)
    fake_energy(tmp_path, "solution", 0.65, 0.00093, 695.0)
    ev = replay.Evidence(tmp_path)
    A = questions.ANALYSES
    assert A["energy_value"](ev, field="millijoules_per_item").value == pytest.approx(6.8e3 / 4096)
    assert A["energy_value"](ev, field="mean_power_w", variant="solution").value == 695.0
    assert A["energy_value"](ev, field="gflop_per_joule", variant="solution").value == pytest.approx(550 / 0.65)
    assert A["energy_value"](ev, field="tflops").value == pytest.approx(0.55 / 0.0107)
    assert A["energy_ratio"](ev).value == pytest.approx(6.8 / 0.65)
    with pytest.raises(PerflabError, match="energy field"):
        A["energy_value"](ev, field="watts")
    with pytest.raises(PerflabError, match=r"no slow\.energy\.json .*`perflab run ID`"):
        A["energy_value"](replay.Evidence(tmp_path / "none"))


# ------------------------------------------------------------------------------------ puzzle.toml

def toml(pid: str) -> dict:
    return tomllib.loads((CATALOG / PUZZLES[pid] / "puzzle.toml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("pid", PUZZLES)
def test_puzzle_toml_contract(pid):
    d = toml(pid)
    assert d["id"] == pid == PUZZLES[pid].split("-", 1)[1] and d["order"] == 10 * int(PUZZLES[pid][:2])
    assert d["prerequisites"] and len(d["seeds"]) >= 3 and 3 <= len(d["hints"]) <= 4
    assert d["check"]["planted"] == d["taxonomy"][0] and d["check"]["speedup"] >= 2.0
    keys = [q["key"] for q in d["questions"]]
    assert 4 <= len(keys) <= 5 and len(set(keys)) == len(keys)
    assert any(q["analysis"] == "doctor_top_id" and q["args"] == {"variant": "slow"} for q in d["questions"])
    readme = (CATALOG / PUZZLES[pid] / "README.md").read_text(encoding="utf-8")
    assert f"`{pid}`" in readme and f"perflab check {pid}" in readme
    assert f"perflab check {pid}" in shipped_file(CATALOG / PUZZLES[pid], "starter").read_text(encoding="utf-8")


def test_timers_and_energy_tables():
    assert catalog.get("honest-timers").timers.parts == ("encode", "select", "postprocess")
    e = catalog.get("energy-precision").energy
    assert e.items_per_call == 4096 and e.min_time_s >= 1.0 and "nvml" in catalog.get("energy-precision").tools
    assert not catalog.get("streams-concurrency").timers.parts


@pytest.mark.parametrize("table, field", [
    ('timers = { parts = ["encode", "two words"] }', "timers.parts[1]"),
    ('timers = { parts = ["encode"], every = 3 }', "timers.every"),
    ('energy = { items_per_call = 0 }', "energy.items_per_call"),
    ('energy = { min_time_s = -1 }', "energy.min_time_s"),
])
def test_bad_timers_or_energy_table_names_the_field(table, field):
    path = CATALOG / PUZZLES["honest-timers"] / "puzzle.toml"
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^timers = .*$", table, text, flags=re.M)
    with pytest.raises(SpecError, match=re.escape(f"field '{field}'")):
        parse(tomllib.loads(text), path)


# ------------------------------------------------------------------------------------ workloads

torch = pytest.importorskip("torch")


def load_variant(pid: str, variant: str):
    path = shipped_file(CATALOG / PUZZLES[pid], variant)
    spec = importlib.util.spec_from_file_location(f"stte_{next(_ids)}_{variant}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(module, seed):
    out = module.step(module.setup("cpu", seed))
    return out.clone()


@pytest.mark.parametrize("pid", PUZZLES)
def test_variants_agree_on_the_cpu_and_the_starter_is_the_slow_workload(pid, monkeypatch):
    w, s, st = (load_variant(pid, v) for v in ("workload", "solution", "starter"))
    assert w.SIZE == s.SIZE == st.SIZE
    assert_sized_for_the_device(w, monkeypatch)
    check = catalog.get(pid).check                              # energy-precision runs bf16 on the CPU too
    for seed in (0, 7):
        expected = run(w, seed)
        torch.testing.assert_close(run(s, seed), expected, rtol=check.rtol or 1e-5, atol=check.atol or 1e-5)
        assert torch.equal(run(st, seed), expected)
    assert not torch.equal(run(w, 1), run(w, 2))

    def code(variant):
        return re.sub(r'^""".*?"""\n', "", shipped_file(CATALOG / PUZZLES[pid], variant).read_text(encoding="utf-8"),
                      flags=re.DOTALL)

    assert code("starter") == code("workload")


def test_the_expert_gemm_reference_and_block_count():
    from perflab.workloads.expert_gemm import blocks, expert_gemm

    x = torch.randn(4, 5, 8).to(torch.bfloat16)
    w = torch.randn(4, 6, 8).to(torch.bfloat16)
    y = torch.full((4, 5, 6), float("nan"), dtype=torch.bfloat16)
    expert_gemm(x, w, y, first=1, experts=2)
    assert y[0].isnan().all() and y[3].isnan().all() and not y[1:3].isnan().any()
    torch.testing.assert_close(y[2], (x[2].float() @ w[2].float().T).to(torch.bfloat16))
    assert blocks(128, 4096) == 16 and blocks(129, 4096) == 32     # the slow run's 16 blocks for 132 SMs


def test_the_streams_solution_orders_its_streams(monkeypatch):
    """issue() with stand-in streams and events: each side stream waits for the ready event before its
    first expert, every expert runs on a side stream, and the current stream waits for all of them."""
    s = load_variant("streams-concurrency", "solution")
    log = []

    class FakeEvent:
        def __init__(self, *a, **k):
            self.recorded = False

        def record(self, stream=None):
            self.recorded = True
            log.append(("record", stream.name))

    class FakeStream:
        def __init__(self, name):
            self.name = name

        def wait_event(self, event):
            assert event.recorded, "waits on an event that was never recorded"
            log.append(("wait_event", self.name))

        def wait_stream(self, other):
            log.append(("wait_stream", self.name, other.name))

    current = [FakeStream("main")]

    @contextlib.contextmanager
    def use(stream):
        current.append(stream)
        yield
        current.pop()

    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: current[-1])
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "stream", use)
    state = s.setup("cpu", 4)
    state["streams"] = [FakeStream(f"s{i}") for i in range(s.STREAMS)]
    issued = []
    gemm = s.expert_gemm
    monkeypatch.setattr(s, "expert_gemm", lambda *a, **k: issued.append((current[-1].name, k["first"])) or gemm(*a, **k))
    state["out"].fill_(float("nan"))
    s.issue(state)
    expected = run(load_variant("streams-concurrency", "workload"), 4)
    assert torch.equal(state["out"], expected)
    e = state["x"].shape[0]
    assert issued == [(f"s{i % s.STREAMS}", i) for i in range(e)]
    assert log[0] == ("record", "main") and log[1:1 + s.STREAMS] == [("wait_event", f"s{i}") for i in range(s.STREAMS)]
    assert log[-s.STREAMS:] == [("wait_stream", "main", f"s{i}") for i in range(s.STREAMS)]


# ------------------------------------------------------------------------------------ the recordings

RECORDED = [catalog.get(pid) for pid in PUZZLES if replay.recording(catalog.get(pid)).has("slow")]


def wrong(q, value):
    if q.type == "choice":
        return next(c for c in q.choices if c != value)
    if q.type == "taxonomy":
        return "healthy" if value != "healthy" else "host-sync"
    return str(float(value) * (1 + 3 * q.tolerance) + 1.0)


@pytest.mark.parametrize("puzzle", RECORDED, ids=[p.id for p in RECORDED])
def test_recorded_questions_grade_right_and_wrong(puzzle):
    ev = replay.recording(puzzle)
    assert ev.manifest()["gpu"].startswith("NVIDIA H100") and ev.manifest()["device"] == "cuda"
    m = ev.measurements()
    assert m["check"]["solution"]["passed"] and not m["check"]["starter"]["passed"]
    assert m["speedup"]["ci_low"] >= puzzle.check.speedup
    for q in puzzle.questions:
        c = questions.compute(q, ev)
        assert questions.grade(q, str(c.value), c).correct, q.key
        assert not questions.grade(q, wrong(q, c.value), c).correct, q.key
    slow = ev.report("slow")
    assert slow.findings[0].id == puzzle.check.planted
    assert {f.id: f.severity for f in ev.report("solution").findings}.get(puzzle.check.planted) not in ("high", "medium")


def test_the_recordings_show_what_each_puzzle_teaches():
    ev = replay.recording(catalog.get("streams-concurrency"))
    A = questions.ANALYSES
    assert A["concurrency_value"](ev, key="concurrent_pct").value == 0.0
    assert A["concurrency_value"](ev, variant="solution", key="concurrent_pct").value > 50
    assert A["concurrency_value"](ev, key="busiest_stream_pct").value > 90          # busy, yet 12 % full
    ev = replay.recording(catalog.get("nvtx-streams"))
    host = {n: A["stage_time"](ev, name=n, clock="cpu").value for n in ("preprocess", "model", "postprocess")}
    gpu = {n: A["stage_time"](ev, name=n, clock="gpu").value for n in ("preprocess", "model", "postprocess")}
    assert max(host, key=host.get) == "postprocess" and max(gpu, key=gpu.get) == "preprocess"
    assert A["stage_top"](ev, clock="cpu").value == "postprocess"
    assert gpu["preprocess"] > 3 * host["preprocess"] and host["postprocess"] > 30 * gpu["postprocess"]
    ev = replay.recording(catalog.get("honest-timers"))
    assert A["timer_top_part"](ev, method="host").value == "postprocess"
    assert A["timer_top_part"](ev, method="events").value == "encode"
    assert A["timer_ratio"](ev, part="encode").value > 10
    ev = replay.recording(catalog.get("energy-precision"))
    slow, fixed = (json.loads((ev.folder / f"{v}.energy.json").read_text()) for v in ("slow", "solution"))
    for data in (slow, fixed):
        mon = data["monitor"]
        assert len(mon["samples"]) >= 20 and all(s["power_w"] for s in mon["samples"])
        assert mon["summary"]["energy_j_counter"] == pytest.approx(mon["summary"]["energy_j_integrated"], rel=0.1)
    assert fixed["energy"]["mean_power_w"] > slow["energy"]["mean_power_w"]            # more watts, fewer joules
    assert A["energy_ratio"](ev).value > 3


def test_answer_cli_grades_a_recorded_puzzle(capsys):
    from perflab.__main__ import main

    rc = main(["answer", "nvtx-streams", "-a", "gpu_stage=preprocess", "-a", "cause=unfused-elementwise"])
    out = capsys.readouterr().out
    assert rc == 0 and "2/2 right" in out
    rc = main(["answer", "nvtx-streams", "-a", "gpu_stage=postprocess"])
    assert rc == 1
    rc = main(["answer", "nvtx-streams", "-a", "gpu_stage=decode"])
    assert rc == 2 and "not one of the choices" in capsys.readouterr().err


def test_list_and_show_name_the_puzzles(capsys):
    from perflab.__main__ import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(pid in out for pid in PUZZLES)
    for pid in PUZZLES:
        assert main(["show", pid]) == 0
        assert catalog.get(pid).title in capsys.readouterr().out
