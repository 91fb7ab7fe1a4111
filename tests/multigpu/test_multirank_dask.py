"""`perflab doctor FOLDER --scheduler` on a real Dask cluster: a `dask scheduler` and two `dask worker` processes on
127.0.0.1 (free ports, bounded waits, always torn down), on a generated job with a planted straggler; then one
worker killed while it reads a rank, and the report still covers every rank."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from perflab.doctor import diagnose  # noqa: E402
from perflab.paths import child_env  # noqa: E402

START_S = 60.0


@contextmanager
def cluster(tmp: Path, workers: int = 2):
    """(scheduler address, {worker name: Popen}); every process killed on the way out."""
    from distributed import Client

    procs: list[subprocess.Popen] = []
    env = child_env(PERFLAB_CACHE=str(tmp / "worker-cache"), DASK_DISTRIBUTED__WORKER__DAEMON="True")
    spec = tmp / "scheduler.json"
    dask = [sys.executable, "-m", "dask"]
    log = open(tmp / "cluster.log", "wb")

    def start(*args: str) -> subprocess.Popen:
        p = subprocess.Popen([*dask, *args], env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        procs.append(p)
        return p
    try:
        start("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(spec))
        deadline = time.monotonic() + START_S
        while not spec.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(spec.read_text())["address"]
        named = {f"w{i}": start("worker", address, "--name", f"w{i}", "--nworkers", "1", "--nthreads", "1",
                                "--no-dashboard", "--host", "127.0.0.1", "--memory-limit", "2GiB")
                 for i in range(workers)}
        with Client(address, timeout="30s") as c:
            c.wait_for_workers(workers, timeout=START_S)
        yield address, named
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait(timeout=30)
        log.close()


def _job(tmp: Path, ranks: int, layers: int = 20) -> Path:
    from test_multigpu import _folder, _rank

    late = ranks - 1
    return _folder(tmp, [_rank(r, ranks, layers=layers, steps=4, **({"host_us": 6000.0} if r == late else
                                                                      {"wait_us": 6000.0})) for r in range(ranks)])


def _doctor(folder: Path, address: str, tmp: Path) -> subprocess.Popen:
    env = child_env(PERFLAB_CACHE=str(tmp / "client-cache"))
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    return subprocess.Popen([sys.executable, "-m", "perflab", "doctor", str(folder), "--scheduler", address, "--json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _same_as_single_process(out: str, folder: Path, ranks: int) -> dict:
    from test_multirank_merge import assert_same

    report = json.loads(out)
    assert report["source"]["folder"]["ranks_read"] == list(range(ranks))
    assert report["analyses"]["multigpu"]["straggler"] == ranks - 1
    assert_same(report, json.loads(json.dumps(diagnose(folder).to_dict())))
    return report


def test_doctor_runs_on_an_existing_cluster(tmp_path):
    folder = _job(tmp_path / "job", 4)
    with cluster(tmp_path) as (address, _):
        proc = _doctor(folder, address, tmp_path)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    _same_as_single_process(out.decode(), folder, 4)
    made_by_workers = list((tmp_path / "worker-cache" / "rank-summaries").rglob("*.summary.json"))
    assert len(made_by_workers) == 4  # the ranks were read on the workers, not by the client
    assert not list((tmp_path / "client-cache").rglob("*.summary.json"))


def test_a_worker_killed_mid_rank_costs_a_retry_not_the_job(tmp_path):
    from distributed import Client

    ranks = 6
    folder = _job(tmp_path / "job", ranks, layers=300)  # ranks that take a while to read
    with cluster(tmp_path) as (address, workers), Client(address, timeout="30s") as watch:
        victim = workers["w1"]
        proc = _doctor(folder, address, tmp_path)
        deadline, killed = time.monotonic() + 90, False
        while not killed and proc.poll() is None and time.monotonic() < deadline:
            busy = {info["name"]: n for addr, n in watch.processing().items()
                    if n and (info := watch.scheduler_info()["workers"].get(addr))}
            if busy.get("w1"):  # w1 is reading a rank right now
                os.killpg(victim.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.02)
        out, err = proc.communicate(timeout=120)
    assert killed, "the run ended before the worker could be killed mid-rank"
    assert proc.returncode == 0 and out, err.decode()[-3000:]
    _same_as_single_process(out.decode(), folder, ranks)
