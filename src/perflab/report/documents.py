"""The versioned JSON documents of `stats`, `sql` and `diff`, built in one place: what `--json` prints and what
`perflab mcp` serves are the same objects."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from perflab.errors import PerflabError


def stats_document(path: str | Path, names: list[str] | None = None) -> tuple[dict[str, Any], Any, list]:
    """(the perflab.stats/1 document, the trace, the report tables) of a trace or Nsight Systems export."""
    from perflab.analysis.steps.records import trace_notes
    from perflab.analysis.reports.stats_reports import REPORTS, stats_tables
    from perflab.trace.loader import load_timeline

    names = list(names or REPORTS)
    unknown = [n for n in names if n not in REPORTS]
    if unknown:
        raise PerflabError(f"unknown report {unknown[0]!r}: one of {', '.join(REPORTS)}")
    trace = load_timeline(Path(path), nvtx_steps=None)
    tables = stats_tables(trace, names)
    doc = {"schema": "perflab.stats/1", "source": {"path": str(path), "kind": trace.meta.get("source", "kineto"),
                                                    "device": trace.meta.get("device_name", "")},
           "notes": trace_notes(trace), "reports": {t.name: t.to_dict() for t in tables}}
    return doc, trace, tables


def sql_document(path: str | Path, query: str | None, *, schema: bool = False, out: str | Path | None = None,
                 force: bool = False, limit: int | None = None, nvtx_steps: str = "auto") -> tuple[dict[str, Any], list[Path]]:
    """(the perflab.sql/1 document, the files written) of one query, or of --schema. The query runs in DuckDB's
    sandbox (analysis.reports.sql_views); `out` gets its result through perflab.outputs (report.sql_output),
    checked before the trace is read. `limit`: at most that many rows fetched (None: all); the document's
    `more_rows` says whether more were left, `types` gives DuckDB's type of each column."""
    from perflab.analysis.reports.sql_views import VIEWS, open_db
    from perflab.report.sql_output import check_result_output, write_result

    if not schema and not (query or "").strip():
        raise PerflabError('give a query: perflab sql FILE "SELECT name, count(*) FROM kernels GROUP BY 1" '
                           "(--schema lists the views)")
    if out is not None:
        check_result_output(out, force=force, inputs=[path])
    db = open_db(Path(path), nvtx_steps=None if nvtx_steps.lower() == "none" else nvtx_steps)
    more = False
    if schema:
        rows = [(view, ", ".join(db.query(f"SELECT * FROM {view} LIMIT 0")[0])) for view in VIEWS]
        cols, types = ["view", "columns"], ["VARCHAR", "VARCHAR"]
    else:
        cols, types, rows, more = db.fetch(query, limit)
    notes = [n for (n,) in db.query("SELECT note FROM notes")[1]]
    doc = {"schema": "perflab.sql/1", "query": query, "columns": cols, "types": types,
           "rows": [list(r) for r in rows],
           "more_rows": more, "notes": notes}
    written = [write_result(out, doc, force=force, inputs=[path])] if out is not None else []
    return doc, written


def diff_result(before: str, after: str, *, rank: int | None = None, top: int = 10, gate_pct: float | None = None,
                nvtx_steps: str = "auto", say=lambda _stage: None):
    """(the Diff of two traces, the two loaded runs); with gate_pct, its regression gate in Diff.gate (a
    PerflabError naming why when the two cannot be compared)."""
    from perflab.analysis.reports.compare import compare
    from perflab.analysis.reports.regression_gate import gate_runs
    from perflab.doctor.sides import load_run

    steps = None if nvtx_steps.lower() == "none" else nvtx_steps
    say(f"reading and diagnosing {before}")
    b = load_run(before, rank=rank, nvtx_steps=steps)
    say(f"reading and diagnosing {after}")
    a = load_run(after, rank=rank, nvtx_steps=steps)
    gate = gate_runs(b, a, gate_pct) if gate_pct is not None else None
    say("comparing")
    result = compare(b, a, top=top)
    result.gate = gate.to_dict() if gate is not None else None
    return result, b, a
