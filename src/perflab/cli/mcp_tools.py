"""The tools `perflab mcp` serves (MCP SDK 2: mcp.server.mcpserver.MCPServer). Each returns the document its
command prints with --json (schema inside); a user-fixable problem is a tool error of one line, as the CLI's
`perflab: error:` line. Nothing here writes a file unless the call names it (html, or sql's out)."""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from perflab.errors import PerflabError

INSTRUCTIONS = (
    "perflab reads GPU profiles: Kineto/torch.profiler traces (.json, .json.gz, folders of per-rank traces), "
    "Nsight Systems exports (.sqlite), Nsight Compute reports and memory snapshots. Start with `doctor` on a "
    "profile: findings ranked by the share of step time they cost, each with its evidence and fix (ids of the "
    "perflab taxonomy). `diff` compares two profiles (gate_pct for a regression gate), `stats` gives nsys-style "
    "summaries, `sql` runs DuckDB SQL over the trace's views (sql with schema=true lists them)."
)


def _sdk():
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        raise PerflabError("perflab mcp needs the MCP SDK (version 2): pip install 'perflab[mcp]'") from None
    return MCPServer, ToolError


def _serve(ToolError, work: Callable[[], Any]) -> Any:
    """Run one tool: stdout belongs to the protocol, so anything printed goes to stderr; PerflabError -> ToolError."""
    from perflab.errors import one_line

    try:
        with contextlib.redirect_stdout(sys.stderr):
            return work()
    except PerflabError as exc:
        raise ToolError(one_line(str(exc))) from None
    except Exception as exc:  # a bug: still one line, as the CLI's "internal error" (exit 3), not the SDK's bare one
        raise ToolError(one_line(f"internal error: {type(exc).__name__}: {exc}")) from None


def _json(text: str) -> dict[str, Any]:
    return json.loads(text)


def build_server():
    MCPServer, ToolError = _sdk()
    from perflab import __version__

    server = MCPServer("perflab", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool()
    def doctor(path: str, rank: Optional[int] = None, step: Optional[int] = None, nvtx_steps: str = "auto",
               html: Optional[str] = None, force: bool = False) -> dict[str, Any]:
        """Diagnose a profile: findings ranked by the share of step time they cost (perflab.doctor/2). A folder
        of one program's evidence (what perflab investigate writes) gives the investigation report instead.
        html: also write the HTML report to this path (an existing file only with force)."""
        def work():
            from perflab.doctor.investigation_files import is_investigation

            if is_investigation(Path(path)):
                return _investigation(path, html, force)
            from perflab.doctor import diagnose
            from perflab.outputs import check_output, write_output
            from perflab.report.json import report_json

            if html:
                check_output(html, force=force, inputs=[path])
            report = diagnose(Path(path), rank=rank, step=step, nvtx_steps=nvtx_steps)
            if html:
                from perflab.report.html import report_html

                write_output(html, report_html(report), force=force, inputs=[path])
            return _json(report_json(report))
        return _serve(ToolError, work)

    @server.tool()
    def investigation(folder: str, html: Optional[str] = None, force: bool = False) -> dict[str, Any]:
        """The merged top-down report of a folder of one program's evidence (trace, Nsight Compute reports,
        memory snapshot; perflab.investigation/1). html: also write it as HTML to this path."""
        return _serve(ToolError, lambda: _investigation(folder, html, force))

    @server.tool()
    def diff(before: str, after: str, rank: Optional[int] = None, top: int = 10, gate_pct: Optional[float] = None,
             nvtx_steps: str = "auto") -> dict[str, Any]:
        """Compare two traces (perflab.diff/1): step time, GPU busy, time by kernel type and kernel, findings
        that appeared or disappeared. gate_pct: add the regression gate (gate.failed is true when the step time
        got slower by more than gate_pct % beyond noise); profiles that cannot be compared are an error."""
        def work():
            from perflab.report.diff import diff_json
            from perflab.report.documents import diff_result

            result, _, _ = diff_result(before, after, rank=rank, top=top, gate_pct=gate_pct, nvtx_steps=nvtx_steps)
            return _json(diff_json(result))
        return _serve(ToolError, work)

    @server.tool()
    def stats(path: str, reports: Optional[list[str]] = None) -> dict[str, Any]:
        """nsys-style summaries of a trace or Nsight Systems export (perflab.stats/1): cuda_gpu_kern_sum,
        cuda_api_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum, nvtx_sum (all unless `reports` names some)."""
        def work():
            from perflab.report.documents import stats_document

            return json.loads(json.dumps(stats_document(path, reports)[0], default=float))
        return _serve(ToolError, work)

    @server.tool()
    def sql(path: str, query: Optional[str] = None, schema: bool = False, out: Optional[str] = None,
            force: bool = False, limit: int = 1000, nvtx_steps: str = "auto") -> dict[str, Any]:
        """A DuckDB query over the trace's views (perflab.sql/1): events, kernels, memcpy, memset, gpu_ops, api,
        sync, nvtx, cpu_ops, os_runtime, steps, devices, meta, notes; schema=true lists their columns. The query
        runs in DuckDB's sandbox: it reads only those views and writes no file. limit: at most this many rows
        (0: all; more_rows says whether some were left). out: also write the result to this .csv, .json or
        .parquet file (an existing one only with force)."""
        def work():
            from perflab.report.documents import sql_document

            doc, written = sql_document(path, query, schema=schema, out=out, force=force, limit=limit or None,
                                        nvtx_steps=nvtx_steps)
            return json.loads(json.dumps({**doc, "written": [str(p) for p in written]}, default=str))
        return _serve(ToolError, work)

    return server


def _investigation(folder: str, html: Optional[str], force: bool) -> dict[str, Any]:
    from perflab.doctor.investigation import build
    from perflab.outputs import check_output, write_output
    from perflab.report.investigation_terminal import investigation_json

    if html:
        check_output(html, force=force, inputs=[folder])
    inv = build(Path(folder))
    if html:
        from perflab.report.html import investigation_html

        write_output(html, investigation_html(inv), force=force, inputs=[folder])
    return json.loads(investigation_json(inv))
