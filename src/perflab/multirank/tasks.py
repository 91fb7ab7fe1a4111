"""What a worker runs for one file of a folder: its summary from the cache, else from the trace (then cached)."""
from __future__ import annotations

import multiprocessing
import os

from perflab.errors import UnreadableInput
from perflab.multirank.store import content_key, local_copy, read_cached, summary_key, write_cached
from perflab.multirank.summary import SCHEMA, summarize_file
from perflab.trace.torch_profiler.kineto_folder import FileEntry


def rank_summary(path: str, step: int | None = None, with_report: bool = False) -> dict:
    """{"summary": ..., "report": the rank's own report or None}; every failure to read is a summary whose
    `file` says why (status unreadable), never an exception."""
    if multiprocessing.current_process().daemon:  # a Dask worker: the reader may not start processes of its own
        os.environ["PERFLAB_READER_PROCESSES"] = "1"
    try:
        key = summary_key(content_key(path), step)
    except (OSError, UnreadableInput) as exc:
        return {"summary": unreadable(path, exc), "report": None}
    summary = read_cached(key, "summary")
    report = read_cached(key, "report") if with_report and summary and "meta" in summary else None
    if summary is not None and (report is not None or not with_report or "meta" not in summary):
        return _at(path, summary, report)
    try:
        with local_copy(path) as local:
            summary, report = summarize_file(local, step=step, name=path, with_report=with_report)
    except (OSError, UnreadableInput) as exc:
        return {"summary": unreadable(path, exc), "report": None}
    write_cached(key, "summary", summary)
    if report is not None:
        write_cached(key, "report", report)
    return {"summary": summary, "report": report}


def _at(path: str, summary: dict, report: dict | None) -> dict:
    """A cached summary names the file it was made from: the same content may now be at another path."""
    summary["file"]["path"] = path
    if "meta" in summary:
        summary["meta"]["path"] = path
    if report is not None:
        report["source"]["path"] = path
        if "cpu_report" in report:
            report["cpu_report"]["source"]["path"] = path
    return {"summary": summary, "report": report}


def unreadable(path: str, exc: Exception) -> dict:
    why = str(exc).removeprefix(f"{path}: ") or type(exc).__name__
    return {"schema": SCHEMA, "file": FileEntry(path, "unreadable", why).to_dict()}
