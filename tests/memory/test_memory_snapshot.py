"""Memory snapshots: the restricted reader, the JSON conversion, the analyses, the memory doctor, the
memory questions and the memory check's decision, on synthetic snapshots (exact numbers) and on two
snapshots recorded on an H100 (tests/data/memory)."""
from __future__ import annotations

import gzip
import json
import os
import pickle
from pathlib import Path

import pytest

from perflab.analysis.gpu_memory import memory as mem
from perflab.doctor import diagnose
from perflab.errors import PerflabError, UnreadableInput
from perflab.trace import sniff
from perflab.trace.snapshot import RefusedPickle, convert, load, read_raw

DATA = Path(__file__).resolve().parents[1] / "data" / "memory"
MB = 2**20


def frames(name, line=10, filename="/srv/app/model.py"):
    return [{"filename": "/usr/lib/python3/site-packages/torch/nn/modules/module.py", "line": 1, "name": "_call_impl"},
            {"filename": filename, "line": line, "name": name}]


def segment(pool, total_mb, blocks, address, stream=0):
    return {"device": 0, "address": address, "total_size": total_mb * MB, "allocated_size": 0, "active_size": 0,
            "requested_size": 0, "stream": stream, "segment_type": "large", "segment_pool_id": pool,
            "is_expandable": False, "frames": [],
            "blocks": [{"address": address + i * MB, "size": size_mb * MB, "requested_size": size_mb * MB,
                        "state": state, "frames": fr} for i, (size_mb, state, fr) in enumerate(blocks)]}


def graphs_snapshot(n_graphs=8, pool_mb=600):
    """A default pool (weights) and n_graphs private pools, each holding a 10 MB static output per graph
    allocated at the same line, the rest free (capture temporaries)."""
    segs = [segment((0, 0), 2000, [(1900, "active_allocated", frames("load_weights", 5)),
                                   (100, "inactive", [])], 1 << 40)]
    for i in range(n_graphs):
        segs.append(segment((i + 1, 0), pool_mb, [(10, "active_allocated", frames("capture", 42)),
                                                  (pool_mb - 10, "inactive", [])], (i + 2) << 40))
    trace = [{"action": "segment_alloc", "addr": 9 << 40, "size": 100 * MB, "stream": 0, "frames": []},
             {"action": "alloc", "addr": 9 << 40, "size": 64 * MB, "stream": 0, "frames": frames("peak", 77)},
             {"action": "free_requested", "addr": 9 << 40, "size": 64 * MB, "stream": 0, "frames": []},
             {"action": "free_completed", "addr": 9 << 40, "size": 64 * MB, "stream": 0, "frames": []},
             {"action": "segment_free", "addr": 9 << 40, "size": 100 * MB, "stream": 0, "frames": []}]
    return {"segments": segs, "device_traces": [trace], "allocator_settings": {"expandable_segments": False}}


def cached_snapshot():
    """One default pool: 1000 MB allocated, 3000 MB cached free in two blocks."""
    return {"segments": [segment((0, 0), 2000, [(1000, "active_allocated", frames("w")), (1000, "inactive", [])], 0),
                         segment((0, 0), 2000, [(2000, "inactive", [])], 1 << 40)],
            "device_traces": [[]]}


def healthy_snapshot():
    return {"segments": [segment((0, 0), 1024, [(1000, "active_allocated", frames("w")), (24, "inactive", [])], 0)],
            "device_traces": [[]]}


def write_pickle(tmp_path, raw, name="snap.pickle"):
    path = tmp_path / name
    path.write_bytes(pickle.dumps(raw, protocol=4))
    return path


# ------------------------------------------------------------------------------ the restricted reader

class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_and_never_runs(tmp_path, capsys):
    from perflab.__main__ import main

    marker = tmp_path / "pwned"
    evil = write_pickle(tmp_path, {"segments": [_RunsCode(marker)], "device_traces": []}, "evil.pickle")
    assert sniff.sniff(evil) == sniff.MEMORY  # it looks like a snapshot pickle
    with pytest.raises(RefusedPickle, match="refused to load .*system.*not executed"):
        load(evil)
    assert main(["doctor", str(evil)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("perflab: error:") and "refused" in err and len(err.splitlines()) == 1
    assert main(["memory", "convert", str(evil), str(tmp_path / "out.json")]) == 2
    assert not marker.exists(), "the pickle's code ran"
    assert not (tmp_path / "out.json").exists()


def test_any_global_is_refused_even_a_harmless_one(tmp_path):
    path = write_pickle(tmp_path, {"segments": [], "x": complex(1, 2)})  # complex pickles as a global
    with pytest.raises(RefusedPickle, match="builtins.complex"):
        read_raw(path)


def test_gzipped_pickle_and_broken_input(tmp_path):
    raw = graphs_snapshot(2)
    gz = tmp_path / "snap.pickle.gz"
    gz.write_bytes(gzip.compress(pickle.dumps(raw)))
    assert mem.totals(load(gz)) == mem.totals(load(write_pickle(tmp_path, raw)))
    truncated = tmp_path / "cut.pickle"
    truncated.write_bytes(pickle.dumps(raw)[:200])
    with pytest.raises(UnreadableInput, match="not a readable snapshot pickle"):
        load(truncated)
    not_a_snapshot = tmp_path / "list.pickle"
    not_a_snapshot.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(UnreadableInput, match="not a memory snapshot"):
        load(not_a_snapshot)
    bad_block = tmp_path / "bad.json"
    bad_block.write_text(json.dumps({"segments": [{"total_size": 1, "blocks": [{"state": "inactive"}]}],
                                     "device_traces": []}))
    with pytest.raises(UnreadableInput, match="malformed memory snapshot"):
        load(bad_block)


def test_json_conversion_keeps_the_structure_and_is_recognized(tmp_path):
    raw = graphs_snapshot(3)
    out = convert(write_pickle(tmp_path, raw), tmp_path / "snap.json.gz")
    assert sniff.sniff(out) == sniff.MEMORY
    text = gzip.decompress(out.read_bytes()).decode()
    assert text.startswith('{"allocator_settings"')
    back = json.loads(text)
    assert back["segments"][1]["segment_pool_id"] == [1, 0]  # tuples become lists
    assert back["device_traces"] == raw["device_traces"]
    assert mem.totals(load(out)) == mem.totals(load(write_pickle(tmp_path, raw)))


# ----------------------------------------------------------------------------------------- analyses

def test_totals_pools_and_sites_of_a_synthetic_snapshot(tmp_path):
    snap = load(write_pickle(tmp_path, graphs_snapshot(8, 600)))
    t = mem.totals(snap)
    assert t["reserved_mb"] == 2000 + 8 * 600
    assert t["allocated_mb"] == 1900 + 8 * 10
    assert t["free_mb"] == 100 + 8 * 590
    assert t["largest_free_mb"] == 590
    assert t["fragmentation"] == pytest.approx(1 - 590 / (100 + 8 * 590), abs=1e-4)
    pp = mem.private_pools(snap)
    assert (pp["count"], pp["reserved_mb"], pp["mean_mb"], pp["shared_pool_saving_mb"]) == (8, 4800, 600, 4200)
    sites = mem.top_sites(snap)
    assert sites[0]["site"] == "model.py:5 load_weights" and sites[0]["mb"] == 1900  # torch frames skipped
    assert sites[1] == {"site": "model.py:42 capture", "mb": 80.0, "blocks": 8, "pct": pytest.approx(4.04, abs=0.01)}
    dup = mem.duplicated_buffers(snap)
    assert dup[0]["copies"] == 8 and dup[0]["pools"] == 8 and dup[0]["redundant_mb"] == 70


def test_timeline_reconstructs_the_level_before_the_history_and_the_peak(tmp_path):
    snap = load(write_pickle(tmp_path, graphs_snapshot(2, 100)))
    tl = mem.timeline(snap)
    end = mem.totals(snap)
    assert tl["start_allocated_mb"] == end["allocated_mb"]  # the 64 MB came and went
    assert tl["peak_allocated_mb"] == end["allocated_mb"] + 64
    assert tl["peak_reserved_mb"] == end["reserved_mb"] + 100
    assert tl["peak_site"] == "model.py:77 peak"
    assert tl["series"]["allocated_mb"][1] == end["allocated_mb"] + 64
    assert tl["actions"] == {"segment_alloc": 1, "alloc": 1, "free_requested": 1, "free_completed": 1,
                             "segment_free": 1}


# ------------------------------------------------------------------------------------- the doctor

def test_doctor_graph_pools(tmp_path):
    report = diagnose(write_pickle(tmp_path, graphs_snapshot(8, 600)))
    top = report.top
    assert report.source["kind"] == "memory"
    assert top.id == "memory-capacity" and top.severity == "high"
    assert top.evidence["private_pools"] == 8 and top.evidence["shared_pool_saving_mb"] == 4200
    assert top.gain_pct == pytest.approx(100 * 4200 / 6800, abs=0.1)
    assert "graph_pool_handle" in top.fix
    json.dumps(report.to_dict())


def test_doctor_reserved_much_more_than_allocated(tmp_path):
    report = diagnose(write_pickle(tmp_path, cached_snapshot()))
    assert report.ids() == ["memory-capacity"]
    f = report.top
    assert (f.evidence["reserved_mb"], f.evidence["allocated_mb"], f.evidence["free_mb"]) == (4000, 1000, 3000)
    assert f.gain_pct == 75.0 and f.severity == "high"


def test_doctor_healthy_snapshot(tmp_path):
    report = diagnose(write_pickle(tmp_path, healthy_snapshot()))
    assert report.ids() == ["healthy"] and report.top.severity == "info"


def test_same_size_weights_of_many_layers_are_not_duplicates(tmp_path):
    raw = {"segments": [segment((0, 0), 2000, [(20, "active_allocated", frames("quantize", 20))] * 90
                                + [(200, "inactive", [])], 0)], "device_traces": [[]]}
    snap = load(write_pickle(tmp_path, raw))
    assert mem.duplicated_buffers(snap) == []
    assert diagnose(snap_path := write_pickle(tmp_path, raw, "w.pickle")).ids() == ["healthy"], snap_path


def test_recorded_h100_snapshots():
    slow = diagnose(DATA / "h100_graphs_per_batch.memory.json.gz")
    d = slow.analyses["memory"]["device"]
    assert sum(p["reserved_mb"] for p in d["pools"]) == d["totals"]["reserved_mb"]
    big = [p for p in d["pools"] if p["private"] and p["reserved_mb"] > 1000]
    assert len(big) == 16  # one pool per captured batch size
    assert slow.top.id == "memory-capacity" and slow.top.severity == "high"
    assert slow.top.evidence["private_pools"] == d["private_pools"]["count"] == 17
    assert d["timeline"]["events"] == 4000 and d["timeline"]["peak_site"]
    fixed = diagnose(DATA / "h100_shared_pool.memory.json.gz")
    assert fixed.ids() == ["healthy"]
    fd = fixed.analyses["memory"]["device"]
    assert fd["totals"]["reserved_mb"] < d["totals"]["reserved_mb"] / 4


# ------------------------------------------------------------------------ questions and the check

def test_memory_questions_from_a_recording_folder(tmp_path):
    from perflab.puzzles import questions
    from perflab.puzzles.evidence.memory import snapshot_file
    from perflab.puzzles.engine.replay import Evidence

    convert(write_pickle(tmp_path, graphs_snapshot(8, 600)), snapshot_file(tmp_path, "slow"))
    (tmp_path / "measurements.json").write_text(json.dumps({"profiled": {"slow": {"median_ms": 9.0},
                                                                         "solution": {"median_ms": 3.0}}}))
    (tmp_path / "configs.json").write_text(json.dumps({"rows": [{"gbps": 96.2}]}))
    ev = Evidence(tmp_path, "fake")
    A = questions.ANALYSES
    assert A["memory_doctor_top_id"](ev).value == "memory-capacity"
    assert A["memory_field"](ev, path="private_pools.count").value == 8
    assert A["memory_field"](ev, path="totals.reserved_over_allocated").value == pytest.approx(6800 / 1980, abs=1e-3)
    assert A["measurement_ratio"](ev, numerator="profiled.slow.median_ms",
                                  denominator="profiled.solution.median_ms").value == 3.0
    assert A["artifact_field"](ev, file="configs.json", path="rows.0.gbps").value == 96.2
    with pytest.raises(PerflabError, match="no recorded solution memory snapshot"):
        A["memory_field"](ev, path="totals.reserved_mb", variant="solution")
    with pytest.raises(PerflabError, match="must be a .json file name"):
        A["artifact_field"](ev, file="../secrets.json", path="x")


def _puzzle(tmp_path, check: str):
    from perflab.puzzles.engine import spec

    folder = tmp_path / "pz"
    folder.mkdir(exist_ok=True)
    for f in ("workload.py", "solution.py", "starter.py"):
        (folder / f).write_text("def setup(device, seed):\n    return {}\n\ndef step(state):\n    return 0\n")
    (folder / "puzzle.toml").write_text(f'id = "pz"\ntitle = "t"\nlevel = 1\norder = 1\nstory = "s"\nquestion = "q"\n'
                                        f'look_at = "l"\ntaxonomy = ["memory-capacity"]\n[check]\n{check}\n')
    return spec.load(folder / "puzzle.toml")


def test_check_metric_in_puzzle_toml(tmp_path):
    from perflab.puzzles.engine.spec import SpecError

    p = _puzzle(tmp_path, 'metric = "reserved_mb"\nreduction = 3.0')
    assert (p.check.metric, p.check.reduction) == ("reserved_mb", 3.0)
    assert _puzzle(tmp_path, "speedup = 2.0").check.metric == "time"
    with pytest.raises(SpecError, match="check.metric' must be one of time, peak_reserved_mb, reserved_mb"):
        _puzzle(tmp_path, 'metric = "watts"')
    with pytest.raises(SpecError, match="check.reduction' must be >= 1.0"):
        _puzzle(tmp_path, 'metric = "reserved_mb"\nreduction = 0.5')


@pytest.mark.parametrize("fixed_mb, passes", [(1000.0, True), (4000.0, False)])
def test_memory_check_decides_on_the_ratio_and_the_memory_doctor(tmp_path, monkeypatch, fixed_mb, passes):
    """The decision of the memory stage (the measuring itself needs CUDA: tests/gpu and the recordings)."""
    from perflab.puzzles.engine import checker

    from perflab.puzzles.evidence import memory as memory_evidence
    p = _puzzle(tmp_path, 'metric = "reserved_mb"\nreduction = 3.0')
    measured = iter([{"reserved_mb": 9000.0}, {"reserved_mb": fixed_mb}])

    def fake_measure(module, device, seed, *, snapshot_to=None, **kw):
        numbers = next(measured)
        if snapshot_to is not None:  # the fix's snapshot: shared pool (passes) or pools per graph (fails)
            raw = healthy_snapshot() if passes else graphs_snapshot(8, 600)
            convert(write_pickle(tmp_path, raw, "fix.pickle"), snapshot_to)
        return numbers

    monkeypatch.setattr(memory_evidence, "measure", fake_measure)
    result = checker.CheckResult(p.id, "fix.py", "cuda", checker.Correctness(True, 1))
    out = memory_evidence.check_memory(p, None, None, result, tmp_path, device="cuda", seed=1)
    assert out.speed.point == pytest.approx(9000.0 / fixed_mb)
    assert out.speed.passed is passes and out.evidence.ok is passes and out.passed is passes
    assert out.speed.statistic == "reserved_mb ratio (slow / fix)"


def test_check_output_of_a_memory_puzzle_renders():
    from rich.console import Console

    from perflab.cli.puzzles import _render_check
    from perflab.puzzles.engine import checker, stats

    r = checker.CheckResult("pz", "fix.py", "cuda", checker.Correctness(True, 5),
                            speed=stats.SpeedupResult(5.26, 5.26, 5.26, 3.0, True, 1, "reserved_mb ratio (slow / fix)",
                                                      1.0),
                            slow={"reserved_mb": 20194.0}, fixed={"reserved_mb": 3842.0},
                            evidence=checker.Evidence(True, "memory-capacity", ["healthy (info)"]))
    console = Console(width=120, record=True)
    _render_check(console, r)
    text = console.export_text()
    assert "reserved_mb: slow 20,194 MB, fix 3,842 MB, reduction 5.26×" in text and "PASS" in text


def test_an_allocation_inside_perflabs_own_call_hooks_is_the_callers():
    """Under `perflab profile`/`investigate`, a module call goes through perflab's step hooks: an allocation made
    inside it names the program's line that called the module, not the hook (a device run had put
    step_hooks.py:top_level at the top of an out-of-memory program's held memory)."""
    from perflab.analysis.gpu_memory.memory import site
    from perflab.analysis.gpu_memory.memory_peak import function_of
    from perflab.trace.snapshot import Frame

    frames = [Frame("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 125, "forward"),
              Frame("/usr/lib/python3/site-packages/torch/nn/modules/module.py", 1750, "_call_impl"),
              Frame("/repo/src/perflab/toolkit/step_hooks.py", 42, "top_level"),
              Frame("/repo/src/perflab/toolkit/step_hooks.py", 55, "__call__"),
              Frame("/tmp/oom.py", 7, "<module>")]
    assert site(frames) == "oom.py:7 <module>"
    assert function_of(frames) == "oom.py:<module>"
