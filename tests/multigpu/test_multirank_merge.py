"""The multi-rank doctor from per-rank summaries (perflab.multirank) gives the single-process doctor's report.

Every multi-rank input we have: the 8-rank real DLRM trace, the HTA samples (two ranks of a 128-rank job), the
recorded 2x H200 jobs, the multi-GPU puzzles' recordings (slow and fixed), and synthetic folders that plant a
straggler, exposed communication, an unreadable file and another job's trace. Reports are compared whole
(source, verdict, findings with their evidence and events, analyses) to within float rounding.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from perflab.doctor import diagnose
from perflab.multirank import diagnose_folder
from perflab.multirank import store
from perflab.trace.builders import synthetic

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(__file__).resolve().parents[3] / "shared"
REAL = SHARED / "real-traces" / "param_dlrm_v100_8rank"
HTA = SHARED / "peer-traces" / "hta"
H200 = Path(__file__).parents[1] / "data" / "multigpu" / "h200x2"
CATALOG = ROOT / "src" / "perflab" / "catalog"
RECORDED = [H200 / n for n in ("ddp", "exposed", "straggler")] + [
    CATALOG / p / "artifacts" / f"{k}.ranks" for p in ("71-straggler", "72-tp-scaling-knee") for k in ("slow", "solution")]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_CACHE", str(tmp_path / "cache"))


def _plain(report) -> dict:
    return json.loads(json.dumps(report.to_dict()))


def assert_same(a, b, where="report"):
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a.keys() ^ b.keys())}"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} items, not {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _both(folder: Path, **kw) -> tuple[dict, dict]:
    return _plain(diagnose_folder(str(folder), **kw)), _plain(diagnose(folder, **kw))


@pytest.mark.parametrize("folder", [REAL, *RECORDED], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_summaries_give_the_single_process_report(folder):
    if not folder.is_dir():
        pytest.skip(f"{folder} not available")
    merged, single = _both(folder)
    assert len(merged["source"]["ranks"]) >= 2
    assert_same(merged, single)


def test_the_hta_sample_ranks_of_a_128_rank_job(tmp_path):
    if not HTA.is_dir():
        pytest.skip("peer traces not available")
    folder = tmp_path / "tf"
    folder.mkdir()
    for f in HTA.glob("trace_filter__sampled_rank-*"):
        (folder / f.name).symlink_to(f)
    merged, single = _both(folder)
    assert {"comm-not-overlapped", "load-imbalance"} <= {f["id"] for f in merged["findings"]}
    assert_same(merged, single)


def test_another_rank_and_one_step_of_the_real_job():
    if not REAL.is_dir():
        pytest.skip("real traces not available")
    for kw in ({"rank": 5}, {"step": 10}):
        merged, single = _both(REAL, **kw)
        assert_same(merged, single)


def _planted(tmp_path) -> Path:
    from test_multigpu import _folder, _rank

    folder = _folder(tmp_path, [_rank(0, 3, wait_us=5000.0), _rank(1, 3, wait_us=4000.0), _rank(2, 3, host_us=5000.0)])
    (folder / "rank3.trace.json").write_text('{"traceEvents": [{"name": "x", "ph": "X", "ts": 1')  # cut short
    (folder / "notes.txt").write_text("not a trace")
    other = synthetic.TraceBuilder(rank=0, world_size=8)
    with other.step(0):
        other.op("aten::mm", [("gemm", 100.0, (1, 1, 1), (1, 1, 1))])
    other.write(folder / "old_job_rank0.json")
    return folder


def test_a_straggler_and_files_that_are_no_rank(tmp_path):
    folder = _planted(tmp_path)
    merged, single = _both(folder)
    assert merged["analyses"]["multigpu"]["straggler"] == 2
    statuses = {Path(f["path"]).name: f["status"] for f in merged["source"]["folder"]["files"]}
    assert statuses["rank3.trace.json"] == "unreadable" and statuses["notes.txt"] == "not-a-trace"
    assert statuses["old_job_rank0.json"] == "other-job"
    assert_same(merged, single)


def test_exposed_allreduce_and_its_overlapped_fix(tmp_path):
    from test_multigpu import _folder, _rank

    for name, overlap in (("slow", False), ("fixed", True)):
        folder = _folder(tmp_path / name, [_rank(r, 2, comm_us=2500.0, overlap=overlap) for r in (0, 1)])
        merged, single = _both(folder)
        assert_same(merged, single)


def test_a_second_run_reads_only_summaries(tmp_path, monkeypatch):
    folder = tmp_path / "job"
    shutil.copytree(REAL if REAL.is_dir() else RECORDED[-1], folder)
    first = _plain(diagnose_folder(str(folder)))
    import perflab.multirank.summary as summary

    def no_trace(*a, **k):
        raise AssertionError("a trace was read on the second run")
    monkeypatch.setattr(summary, "summarize_file", no_trace)
    monkeypatch.setattr("perflab.multirank.tasks.summarize_file", no_trace)
    assert _plain(diagnose_folder(str(folder))) == first
    renamed = folder.parent / "moved"
    folder.rename(renamed)  # same content elsewhere: the content key still finds the summaries
    assert _plain(diagnose_folder(str(renamed)))["findings"] == first["findings"]


def test_a_changed_file_is_read_again(tmp_path):
    from test_multigpu import _folder, _rank

    folder = _folder(tmp_path, [_rank(0, 2, wait_us=5000.0), _rank(1, 2, host_us=5000.0)])
    assert _plain(diagnose_folder(str(folder)))["analyses"]["multigpu"]["straggler"] == 1
    _rank(0, 2, host_us=9000.0).write(folder / "rank0.trace.json.gz")  # now rank 0 is late
    _rank(1, 2, wait_us=9000.0).write(folder / "rank1.trace.json.gz")
    assert _plain(diagnose_folder(str(folder)))["analyses"]["multigpu"]["straggler"] == 0


def test_summary_is_small_and_versioned(tmp_path):
    from perflab.multirank.tasks import rank_summary

    f = sorted(REAL.iterdir())[0] if REAL.is_dir() else sorted(RECORDED[-1].iterdir())[0]
    s = rank_summary(str(f))["summary"]
    assert s["schema"] == "perflab.rank-summary/3" and s["file"]["status"] == "read"
    assert len(json.dumps(s)) < f.stat().st_size  # smaller than the gzipped trace itself
    assert store.read_cached(store.summary_key(store.content_key(str(f)), None), "summary") == s


PIPELINE = Path(__file__).parents[1] / "data" / "multigpu" / "h200x4-pipeline-bubble"


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_pipeline_stages_are_read_across_ranks_in_the_merge(tmp_path, rank):
    from test_pipeline_bubble import _job

    merged, single = _both(_job(tmp_path, stages=4, micro_batches=2), rank=rank)
    assert "pipeline-bubble" in {f["id"] for f in merged["findings"]}
    assert_same(merged, single)


@pytest.mark.parametrize("kind", ["slow", "solution"])
def test_the_recorded_pipeline_job(kind):
    if not (PIPELINE / f"{kind}.ranks").is_dir():
        pytest.skip("the 4x H200 pipeline recording is not available")
    merged, single = _both(PIPELINE / f"{kind}.ranks", rank=0)
    assert_same(merged, single)


def test_comm_below_roof_judges_the_last_arriving_rank_in_the_merge(tmp_path):
    from test_comm_roof import BIG, _folder, _rank

    slow = _folder(tmp_path / "slow", [_rank(r, comm=[(BIG, 2000.0)]) for r in (0, 1)])
    merged, single = _both(slow)
    assert "comm-below-roof" in {f["id"] for f in merged["findings"]}
    assert_same(merged, single)
    # rank 0 waits for rank 1: only the matched transfer across ranks tells the wait from a slow link
    late = _folder(tmp_path / "late", [_rank(0, comm=[(BIG, 300.0)], wait_us=3000.0), _rank(1, comm=[(BIG, 300.0)])])
    merged, single = _both(late, rank=0)
    assert "comm-below-roof" not in {f["id"] for f in merged["findings"]}
    assert_same(merged, single)
    hidden = _folder(tmp_path / "hidden", [_rank(r, comm=[(BIG, 1500.0)], overlap=True) for r in (0, 1)])
    assert_same(*_both(hidden))


def test_a_window_of_compilation_on_every_rank(tmp_path):
    import gzip

    src = Path(__file__).parents[1] / "data" / "stacks" / "profile_as_function_mode_default.trace.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    folder = tmp_path / "job"
    folder.mkdir()
    for r in (0, 1):
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": r, "world_size": 2, "backend": "nccl"}
        (folder / f"rank{r}.trace.json").write_text(json.dumps(doc))
    merged, single = _both(folder)
    assert merged["verdict"].startswith("The analysed window is compilation") and merged["findings"] == []
    assert merged["source"]["ranks"] == [0, 1]
    assert_same(merged, single)
