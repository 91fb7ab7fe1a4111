"""Run the per-rank pass over a folder's files: in this process, on a local Dask cluster, or on an existing one.

In-process where the summaries still to make are too little work for a cluster to pay for its start (their
bytes, at SUMMARY_BYTES_PER_S, against CLUSTER_START_S; files whose summary is cached count nothing: a second
run reads summaries) or where Dask is not installed; otherwise a local cluster of processes, one thread each
(the reader holds the GIL), as many as the cores, the memory (a rank's reader needs about
READER_BYTES_PER_FILE_BYTE times its file) and the files allow. `scheduler` (or DASK_SCHEDULER_ADDRESS) names an
existing cluster: its workers must import this perflab and read the same paths (a shared filesystem, or URLs
through fsspec). PERFLAB_WORKERS=N forces a local cluster of N processes (0: this process). A worker that dies
while it reads a rank costs that rank a retry on another worker (Dask reschedules its tasks); a file that cannot
be read comes back as an unreadable entry, as in the single-process doctor.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from perflab.errors import PerflabError
from perflab.multirank.store import is_url, summary_cached
from perflab.multirank.tasks import rank_summary

READER_BYTES_PER_FILE_BYTE = 6      # a plain JSON trace in memory, read and analysed (gzip: times its ratio)
GZIP_RATIO = 10
# a local cluster pays for itself when the work it splits saves more than starting it costs (spawning the
# workers, importing perflab in each, closing them: 1.5-3.5 s measured on 2 cores, docs/multirank/2026-11-27-2vcpu-doctor-at-8-64-256-ranks.md);
# one process summarizes about 40 MB of JSON a second
CLUSTER_START_S = 3.0
SUMMARY_BYTES_PER_S = 40e6
RETRIES = 2

Progress = Callable[[int, int], None]  # (ranks done, ranks in all)


@dataclass
class Plan:
    mode: str                 # in-process | local | scheduler
    workers: int = 1
    memory_per_worker: int = 0
    address: str = ""

    def describe(self) -> str:
        if self.mode == "scheduler":
            return f"Dask cluster at {self.address}"
        if self.mode == "local":
            return f"local Dask cluster of {self.workers} processes ({self.memory_per_worker / 2**30:.1f} GiB each)"
        return "in this process"


def plan(files: list[str], scheduler: str | None = None, step: int | None = None) -> Plan:
    address = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        _need_dask(address)
        return Plan("scheduler", address=address)
    forced = os.environ.get("PERFLAB_WORKERS", "").strip()
    if forced.isdigit() and _has_dask():  # 0: in this process; N: a local cluster of N
        n = int(forced)
        return Plan("local", workers=n, memory_per_worker=_available_memory() // n) if n else Plan("in-process")
    todo = [f for f in files if not summary_cached(f, step)]  # a cached summary is read, not made
    sizes = [_size(f) for f in todo]
    budget = max((_reader_bytes(f, s) for f, s in zip(todo, sizes)), default=0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    memory = _available_memory()
    workers = max(1, min(cores, len(todo), memory // max(budget, 1)))
    work_s = sum(_parsed_bytes(f, s) for f, s in zip(todo, sizes)) / SUMMARY_BYTES_PER_S
    if work_s * (1 - 1 / workers) <= CLUSTER_START_S or not _has_dask():
        return Plan("in-process")
    return Plan("local", workers=workers, memory_per_worker=memory // workers)


FORK_FROM_SERVER_WORKERS = 4


def _fork_from_a_server(workers: int) -> dict:
    """Dask configuration that starts the workers as forks of one server process that imported distributed and this
    reader once (multiprocessing's forkserver), where the platform has it. Spawned, each worker starts an
    interpreter and imports them itself, and the client prepares each start in turn: 16 workers took 3.4-3.6 s to
    start on 16 cores and on 2, a quarter of a 16-worker run of 10 GB; forked from the server, 16 took 1.2 s on 2
    cores. The server's own start is paid once: below FORK_FROM_SERVER_WORKERS workers spawning is as fast or
    faster (2 workers: 0.4-0.5 s spawned, 0.65-0.75 s forked; 4: 0.87-0.93 against 0.80-0.83;
    docs/multirank/benchmark.md)."""
    import multiprocessing

    if workers < FORK_FROM_SERVER_WORKERS or "forkserver" not in multiprocessing.get_all_start_methods():
        return {}
    import dask
    from distributed.utils import get_mp_context

    key = "distributed.worker.multiprocessing-method"
    with dask.config.set({key: "forkserver"}):
        ctx = get_mp_context()   # distributed sets its own preload once; ours, set after, replaces it
    # before the server starts (its first fork); a server already running keeps what it has
    ctx.set_forkserver_preload(["distributed", "perflab.multirank.tasks"])
    return {key: "forkserver"}


def start_local_cluster(workers: int, memory_per_worker: int | str = "auto"):
    """A local Dask cluster of `workers` processes of one thread each (the reader holds the GIL), as the engine
    starts its own."""
    import dask
    from distributed import LocalCluster

    # Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536: every freed column of a rank goes back to the system and
    # the next rank faults it in again, 10-15% more CPU per rank (7x the page faults,
    # docs/multirank/2026-11-27-2vcpu-doctor-at-8-64-256-ranks.md); a rank's memory is freed whole when its task
    # ends either way
    spawn_env = {k: v for k, v in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items()
                 if k != "MALLOC_TRIM_THRESHOLD_"}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": spawn_env, **_fork_from_a_server(workers)}):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory_per_worker,
                            dashboard_address=None, silence_logs=50)


class Engine:
    """`with Engine(plan) as e:` e.summaries(files) then e.report(path) for the report's rank."""

    def __init__(self, how: Plan, step: int | None = None) -> None:
        self.how, self.step = how, step
        self.client = self.cluster = None
        self.reports: dict[str, dict] = {}

    def __enter__(self) -> "Engine":
        if self.how.mode == "local":
            from distributed import Client

            self.cluster = start_local_cluster(self.how.workers, self.how.memory_per_worker)
            self.client = Client(self.cluster)
        elif self.how.mode == "scheduler":
            from distributed import Client

            try:
                self.client = Client(self.how.address, timeout="20s")
            except (OSError, TimeoutError) as exc:
                raise PerflabError(f"cannot reach the Dask scheduler at {self.how.address} ({exc})") from None
        return self

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def summaries(self, files: list[str], progress: Progress | None = None, report_of: str | None = None) -> list[dict]:
        """Every file's summary, in the order of `files`; `report_of`: a file whose rank's own report is made in
        the same pass (the likely report rank: one trace read, not two, where the guess is right)."""
        if self.client is None:
            out = []
            for n, f in enumerate(files, 1):
                got = rank_summary(f, self.step, f == report_of)
                out.append(self._keep(f, got))
                if progress:
                    progress(n, len(files))
            return out
        from distributed import as_completed

        # one task per rank: a rank is seconds of work against milliseconds of scheduling, and its result is the
        # small summary (the trace never leaves the worker)
        futures = self.client.map(rank_summary, files, [self.step] * len(files), [f == report_of for f in files],
                                  pure=False, retries=RETRIES)
        index = {f.key: i for i, f in enumerate(futures)}
        out: list = [None] * len(files)
        # the summaries of the tasks finished since the last look, fetched in one gather: one after the other
        # (fut.result() per rank) this thread waited a round trip per rank, 1.8 s of a 6.2 s map of 64 ranks on 2
        # loaded cores (docs/multirank/2026-11-27-2vcpu-doctor-at-8-64-256-ranks.md), a serial step that grows with
        # the workers' pace
        n = 0
        for batch in as_completed(futures).batches():
            got = self.client.gather(batch, errors="skip")
            ok = iter(got)
            for fut in batch:
                i = index[fut.key]
                out[i] = _outcome(fut, next(ok) if fut.status != "error" else fut.exception(), files[i], self._keep)
                fut.release()
                n += 1
                if progress:
                    progress(n, len(files))
        return out

    def _keep(self, path: str, got: dict) -> dict:
        if got.get("report") is not None:
            self.reports[path] = got["report"]
        return got["summary"]

    def report(self, path: str) -> dict:
        """The rank's own report (kept from the summaries' pass, or from the cache where the summary was made)."""
        if path in self.reports:
            return self.reports[path]
        if self.client is None:
            return rank_summary(path, self.step, True)["report"]
        fut = self.client.submit(rank_summary, path, self.step, True, pure=False, retries=RETRIES)
        return fut.result()["report"]


def _outcome(fut, got, path: str, keep: Callable[[str, dict], dict] = lambda path, got: got["summary"]) -> dict:
    """The summary a finished future brought (`got`: its result, or a failed task's exception); a rank whose every
    worker died reading it (out of memory?) is unreadable, not fatal."""
    from distributed import KilledWorker

    if fut.status != "error":
        return keep(path, got)
    if isinstance(got, KilledWorker):
        from perflab.multirank.tasks import unreadable

        return unreadable(path, RuntimeError("every worker that read it died (out of memory? give workers more "
                                             "memory, or fewer per machine)"))
    raise got


def _need_dask(address: str) -> None:
    if not _has_dask():
        raise PerflabError(f"--scheduler {address} needs Dask: pip install 'perflab[cluster]'")


def _has_dask() -> bool:
    import importlib.util

    return importlib.util.find_spec("distributed") is not None


def _size(path: str) -> int:
    if is_url(path):
        return 0
    try:
        return os.stat(path.removeprefix("file://")).st_size
    except OSError:
        return 0


def _parsed_bytes(path: str, size: int) -> int:
    return size * (GZIP_RATIO if path.endswith(".gz") else 1)


def _reader_bytes(path: str, size: int) -> int:
    return _parsed_bytes(path, size) * READER_BYTES_PER_FILE_BYTE + (256 << 20)


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // 2
