"""A folder of many ranks as map and merge: a per-rank pass (summary.py) in bounded memory, run in-process or
on Dask (engine.py), each rank's summary cached by content (store.py), and the merge from summaries alone
(merge.py).

    from perflab.multirank import diagnose_folder
    report = diagnose_folder("traces/", scheduler="tcp://10.0.0.1:8786")
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the package stays light: `perflab doctor FILE` asks multirank.store whether FILE is a URL
    from perflab.doctor.finding import Report
    from perflab.multirank.engine import Progress


def diagnose_folder(folder: str, *, rank: int | None = None, step: int | None = None, scheduler: str | None = None,
                    progress: Progress | None = None, on_plan=None) -> Report:
    """The doctor's report on a folder of per-rank traces (local path or fsspec URL), as
    perflab.doctor.diagnose gives it, computed one rank at a time. `on_plan(plan)`: told where it runs."""
    from perflab.multirank.engine import Engine, plan
    from perflab.multirank.merge import merge_job
    from perflab.multirank.store import list_folder

    files = list_folder(str(folder))
    how = plan(files, scheduler, step)
    if on_plan:
        on_plan(how)
    with Engine(how, step) as engine:
        # the report is about the lowest rank unless one is named: most often the first file
        summaries = engine.summaries(files, progress, report_of=files[0] if rank is None and files else None)
        return merge_job(str(folder), summaries, lambda view: engine.report(view.meta["path"]), rank=rank)
