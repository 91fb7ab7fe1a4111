"""perflab mcp: the doctor, the investigation report, diff, stats and sql as tools of a Model Context Protocol
server on stdio, so a coding agent reads a profile the way a user does (needs perflab[mcp])."""
from __future__ import annotations

import typer

MCP_HELP = (
    "Serve perflab's readers as Model Context Protocol tools over stdio (for coding agents): doctor, "
    "investigation, diff, stats and sql, each returning the same versioned JSON as --json. Nothing is written "
    "unless a tool is given an explicit output path. Needs the MCP SDK: pip install 'perflab\\[mcp]'. An agent "
    "starts it as: python3 -m perflab mcp"
)


def register(app: typer.Typer) -> None:
    app.command("mcp", help=MCP_HELP)(mcp_cmd)


def mcp_cmd() -> None:
    """Serve the tools over stdio until the client closes the connection (help: MCP_HELP)."""
    from perflab.cli.mcp_tools import build_server

    build_server().run("stdio")
