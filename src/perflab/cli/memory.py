"""perflab memory convert SNAPSHOT OUT.json[.gz]: a memory snapshot pickle -> its JSON conversion."""
from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    memory = typer.Typer(help="Memory snapshots (torch.cuda.memory._dump_snapshot).", no_args_is_help=True)

    @memory.command("convert")
    def convert(
        snapshot: Path = typer.Argument(..., help="Snapshot pickle (read with a restricted unpickler: data only) "
                                                  "or JSON."),
        out: Path = typer.Argument(..., help="Output JSON file; gzipped when it ends in .gz."),
        force: bool = typer.Option(False, "--force", help="overwrite an existing OUT (never the snapshot itself)"),
    ) -> None:
        """Convert a snapshot to JSON (same structure); a pickle that would run code is refused."""
        from perflab.trace.snapshot import convert as convert_snapshot

        dest = convert_snapshot(snapshot, out, force=force)
        typer.echo(f"wrote {dest}")

    app.add_typer(memory, name="memory")
