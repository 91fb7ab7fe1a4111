"""Where the per-rank pass runs (multirank/engine.plan) and the CLI's errors for the multi-rank doctor."""
from __future__ import annotations

import pytest

from perflab.multirank import engine

pytest.importorskip("distributed")


def _files(tmp_path, n: int, size: int) -> list[str]:
    out = []
    for i in range(n):
        f = tmp_path / f"rank{i}.json"
        with open(f, "wb") as fh:
            fh.truncate(size)  # sparse: only the size matters here
        out.append(str(f))
    return out


def test_a_handful_of_small_ranks_run_in_this_process(tmp_path, monkeypatch):
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    monkeypatch.delenv("PERFLAB_WORKERS", raising=False)
    assert engine.plan(_files(tmp_path, 4, 1 << 20)).mode == "in-process"


def test_many_ranks_get_a_local_cluster_sized_to_cores_and_memory(tmp_path, monkeypatch):
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    monkeypatch.delenv("PERFLAB_WORKERS", raising=False)
    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(engine, "_available_memory", lambda: 8 << 30)
    many = engine.plan(_files(tmp_path, 40, 100 << 20))      # 100 MB of JSON each: ~0.85 GB per reader
    assert many.mode == "local" and many.workers == 9 and many.memory_per_worker == (8 << 30) // 9
    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert engine.plan(_files(tmp_path, 40, 100 << 20)).workers == 2


def test_a_scheduler_from_the_option_or_the_environment(tmp_path, monkeypatch):
    files = _files(tmp_path, 2, 10)
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://10.1.2.3:8786")
    assert engine.plan(files).address == "tcp://10.1.2.3:8786"
    assert engine.plan(files, "tcp://127.0.0.1:9").address == "tcp://127.0.0.1:9"
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS")
    monkeypatch.setenv("PERFLAB_WORKERS", "0")
    assert engine.plan(_files(tmp_path, 40, 100 << 20)).mode == "in-process"


def test_cli_errors_are_one_line(tmp_path, capsys):
    from conftest import cli_run

    trace = tmp_path / "one.json"
    trace.write_text('{"traceEvents": []}')
    rc, _, err = cli_run(capsys, "doctor", trace, "--scheduler", "tcp://127.0.0.1:9")
    assert rc == 2 and "one file" in err and "Traceback" not in err
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = cli_run(capsys, "doctor", empty)
    assert rc == 2 and "no readable Kineto trace" in err and len(err.strip().splitlines()) == 1


def test_a_rank_whose_every_worker_died_is_unreadable_not_fatal():
    from distributed import KilledWorker

    class Died:   # a finished future whose task failed
        status = "error"

    entry = engine._outcome(Died(), KilledWorker("rank_summary-1", None, 3), "/jobs/rank7.json")["file"]
    assert entry["status"] == "unreadable" and "died" in entry["reason"] and entry["path"] == "/jobs/rank7.json"


@pytest.mark.parametrize("rank, reads", [(None, 3), (2, 4)])
def test_each_trace_is_read_once_when_the_report_rank_is_the_first_file(tmp_path, monkeypatch, rank, reads):
    """The lowest rank's report is made in the summaries' pass; a named rank's trace is read a second time."""
    from perflab.multirank import diagnose_folder, tasks
    from test_multigpu import _folder, _rank

    monkeypatch.setenv("PERFLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PERFLAB_WORKERS", "0")
    folder = _folder(tmp_path, [_rank(0, 3), _rank(1, 3), _rank(2, 3, host_us=5000.0)])
    read = []

    def counted(path, **kw):
        read.append(path)
        return summarize_file(path, **kw)
    summarize_file = tasks.summarize_file
    monkeypatch.setattr(tasks, "summarize_file", counted)
    report = diagnose_folder(str(folder), rank=rank)
    assert len(read) == reads and report.source["ranks"] == [0, 1, 2]
    assert report.source["rank"] == (rank or 0)


def test_little_work_or_cached_summaries_stay_in_this_process(tmp_path, monkeypatch):
    """64 ranks of 2 MB: less work than a cluster's start saves on 2 cores; once summarized, nothing to split."""
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    monkeypatch.delenv("PERFLAB_WORKERS", raising=False)
    monkeypatch.setenv("PERFLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert engine.plan(_files(tmp_path, 64, 2 << 20)).mode == "in-process"
    big = _files(tmp_path / "big", 16, 40 << 20) if (tmp_path / "big").mkdir() is None else []
    assert engine.plan(big).mode == "local"
    from perflab.multirank import store

    for f in big:  # as a first run leaves them
        key = store.summary_key(store.content_key(f), None)
        store.write_cached(key, "summary", {"schema": "x"})
    assert engine.plan(big).mode == "in-process"
    assert engine.plan(big, step=3).mode == "local"  # another step's summaries are other summaries


@pytest.mark.parametrize("workers, forked", [(2, False), (4, True)])
def test_a_large_local_cluster_forks_its_workers_from_one_server_that_imported_the_reader(workers, forked):
    """From FORK_FROM_SERVER_WORKERS workers up, the workers are forks of multiprocessing's forkserver (their parent
    is that server, not this process where the nannies live), and the rank reader is imported before any task."""
    import multiprocessing
    import os

    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no forkserver on this platform")
    assert engine.FORK_FROM_SERVER_WORKERS == 4
    with engine.Engine(engine.Plan("local", workers=workers, memory_per_worker=2 << 30)) as e:
        parents = set(e.client.run(os.getppid).values())
        preloaded = set(e.client.run(eval, "'perflab.multirank.tasks' in __import__('sys').modules").values())
        summaries = e.client.run(eval, "__import__('perflab.multirank.tasks').multirank.tasks.rank_summary.__name__")
    assert len(summaries) == workers
    assert (os.getpid() not in parents) is forked
    if forked:
        assert preloaded == {True}
