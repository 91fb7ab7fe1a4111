"""A folder of per-rank Kineto traces: which files are the ranks of one job, and what became of every file.

Every file in the folder is accounted for: read (a rank of the job), unreadable (with the reader's reason),
not a Kineto trace, a second trace of a rank already read, or part of another job. Ranks of one job share
their world size, backend, process-group count and NCCL version (Kineto records no job id) and were
recorded together: their absolute times (a trace's `ts` plus its
`baseTimeNanoseconds`, as HTA reads them) lie within JOB_GAP_S of each other. Traces of several jobs are
never merged into one world: when one job holds most of the traces it is the job and the others are
listed as not part of it; otherwise the folder is refused with the list of jobs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from perflab.errors import UnreadableInput
from perflab.trace.model import Trace
from perflab.trace.sniff import KINETO, sniff

JOB_GAP_S = 600.0  # ranks of one job start within minutes of each other; runs further apart are other jobs
_RANK_IN_NAME = re.compile(r"(?:rank|worker|proc|gpu)[-_]?(\d+)", re.I)


@dataclass
class FileEntry:
    path: str
    status: str            # read | unreadable | not-a-trace | duplicate-rank | other-job
    reason: str = ""
    rank: int | None = None
    world_size: int | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}


@dataclass
class Folder:
    path: str
    traces: list[Trace]
    files: list[FileEntry]
    world_size: int
    jobs: list[list[str]] = field(default_factory=list)  # file names of every job found, the chosen one first

    @property
    def missing_ranks(self) -> list[int]:
        read = {t.rank for t in self.traces}
        return [r for r in range(self.world_size) if r not in read] if self.world_size > 1 else []

    def accounting(self) -> dict:
        """What the doctor's source says about the folder."""
        counts: dict[str, int] = {}
        for f in self.files:
            counts[f.status] = counts.get(f.status, 0) + 1
        out = {"folder": self.path, "world_size": self.world_size, "ranks_read": sorted(t.rank for t in self.traces),
               "missing_ranks": self.missing_ranks, "counts": counts, "files": [f.to_dict() for f in self.files],
               "jobs": len(self.jobs)}
        if self.missing_ranks:
            lost = [Path(f.path).name for f in self.files if f.status == "unreadable"]
            out["note"] = (f"{len(self.traces)} of {self.world_size} ranks read (missing: ranks "
                           f"{_span(self.missing_ranks)}" + (f"; unreadable: {', '.join(lost[:3])}" if lost else "")
                           + "): the findings cover the ranks read; comparing ranks (stragglers, waits) needs them all")
        return out


def _span(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks[:8]) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def _start_s(trace: Trace) -> float:
    base = trace.meta.get("base_time_ns")
    base_s = float(base) / 1e9 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0
    return base_s + float(trace.ts.min()) / 1e6


def _end_s(trace: Trace) -> float:
    return _start_s(trace) + float(trace.end.max() - trace.ts.min()) / 1e6


def _key(trace: Trace) -> tuple:
    m = trace.meta
    return (int(m.get("world_size") or 1), str(m.get("backend") or ""), str(m.get("pg_count") or ""),
            str(m.get("nccl_version") or ""))


def _group(traces: list[Trace]) -> list[list[Trace]]:
    """Jobs: same world size and backend, recorded together, each rank once."""
    jobs: list[list[Trace]] = []
    for t in sorted(traces, key=_start_s):
        fits = [j for j in jobs if _key(j[0]) == _key(t) and t.rank not in {x.rank for x in j}
                and _start_s(t) <= max(_end_s(x) for x in j) + JOB_GAP_S and _key(t)[0] > 1]
        if fits:
            fits[-1].append(t)
        else:
            jobs.append([t])
    return jobs


def _describe(job: list[Trace]) -> str:
    world = _key(job[0])[0]
    names = ", ".join(Path(t.meta["path"]).name for t in job[:3]) + (f" and {len(job) - 3} more" if len(job) > 3 else "")
    ranks = ",".join(str(t.rank) for t in sorted(job, key=lambda t: t.rank)[:8]) + ("..." if len(job) > 8 else "")
    return f"[world size {world}, rank {ranks}: {names}]"


def load_folder(path: str | Path, load) -> Folder:
    """Read every file of `path` with `load(file) -> Trace` and pick the job's ranks (see the module doc)."""
    path = Path(path)
    files: dict[str, FileEntry] = {}
    traces: list[Trace] = []
    for f in folder_files(path):
        got = read_rank_file(f, load)
        if isinstance(got, FileEntry):
            files[f.name] = got
        else:
            traces.append(got)
    return choose_job(path, traces, files)


def folder_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if not p.name.startswith("."))


def read_rank_file(f: Path, load, name: str | None = None):
    """`load(f)` for a Kineto trace, else the FileEntry that says why the file gives no rank; `name`: the file's
    name to give in the entry (a copy's source)."""
    name = name or str(f)
    if not f.is_file():
        return FileEntry(name, "not-a-trace", "a folder (only the files directly in it are read)")
    try:
        kind = sniff(f)
        if kind != KINETO:
            return FileEntry(name, "not-a-trace", f"not a Kineto trace ({kind})")
        return load(f)
    except UnreadableInput as exc:
        hint = _RANK_IN_NAME.search(Path(name).name)
        why = str(exc).removeprefix(f"{f}: ") + (f" (rank {hint.group(1)} by its name?)" if hint else "")
        return FileEntry(name, "unreadable", why)


def choose_job(path: Path, traces: list, files: dict[str, FileEntry]) -> Folder:
    """The job among `traces` (every file read) and what became of the others; `files`: the entries of the
    files that gave no trace, by name. A trace here needs only `rank`, `meta` (path, the distributedInfo
    fields, base_time_ns) and `ts`/`end` arrays whose extremes are its first start and last end."""
    if not traces:
        reasons = [e.reason for e in files.values() if e.status == "unreadable"]
        raise UnreadableInput(f"{path}: no readable Kineto trace in this folder" + (f" ({reasons[0]})" if reasons else ""))
    jobs = sorted(_group(traces), key=lambda j: -len(j))
    biggest = jobs[0]
    if len(jobs) > 1 and (len(biggest) == len(jobs[1]) or 2 * len(biggest) < len(traces)):
        listed = "; ".join(_describe(j) for j in jobs[:5]) + (f"; and {len(jobs) - 5} more" if len(jobs) > 5 else "")
        raise UnreadableInput(f"{path} holds the traces of {len(jobs)} different jobs, not the ranks of one: {listed}. "
                              "Give one job's folder (its ranks only), a single trace, or compare two with perflab diff.")
    world = _key(biggest[0])[0]
    for t in biggest:
        files[Path(t.meta["path"]).name] = FileEntry(t.meta["path"], "read", rank=t.rank, world_size=world)
    for job in jobs[1:]:
        for t in job:
            same = _key(t) == _key(biggest[0]) and t.rank in {x.rank for x in biggest}
            why = (f"a second trace of rank {t.rank} (recorded {abs(_start_s(t) - _start_s(biggest[0])):,.0f} s apart)"
                   if same else _why_other(t, biggest[0]))
            files[Path(t.meta["path"]).name] = FileEntry(t.meta["path"], "duplicate-rank" if same else "other-job", why,
                                                         rank=t.rank, world_size=_key(t)[0])
    chosen = sorted(biggest, key=lambda t: t.rank)
    names = [[Path(t.meta["path"]).name for t in j] for j in jobs]
    return Folder(str(path), chosen, [files[k] for k in sorted(files)], world, names)


def _why_other(t: Trace, ref: Trace) -> str:
    for what, mine, theirs in zip(("world size", "backend", "process-group count", "NCCL version"), _key(t), _key(ref)):
        if mine != theirs:
            return f"another job: {what} {mine or 'none'}, not {theirs or 'none'}"
    return f"another job: recorded {abs(_start_s(t) - _start_s(ref)) / 60:,.0f} min apart (another time base or run)"
