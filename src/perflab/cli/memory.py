"""perflab memory convert SNAPSHOT OUT.json[.gz]: a memory snapshot pickle -> its JSON conversion."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

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

    @memory.command("record", context_settings={"allow_interspersed_args": False})
    def record(
        cmd: Optional[List[str]] = typer.Argument(None, metavar="-- CMD", help="the command to run, e.g. -- python "
                                                                               "script.py ARGS"),
        out: Path = typer.Option(Path("memory.json.gz"), "--out", "-o", help="the snapshot's JSON (gzipped: .gz)"),
        target: Optional[str] = typer.Option(None, help="the script or module to record when it is not the first "
                                                        ".py in CMD"),
        max_entries: int = typer.Option(100_000, "--max-entries", help="allocator events kept (the last ones)"),
        force: bool = typer.Option(False, "--force", help="overwrite an existing OUT"),
    ) -> None:
        """Run an unmodified script with the CUDA allocator's history recorded; its snapshot as JSON, for the doctor."""
        from perflab.errors import PerflabError
        from perflab.outputs import check_output
        from perflab.toolkit.memory_record import record_command
        from perflab.toolkit.profile import find_target

        if not cmd:
            raise PerflabError("give the command to record, e.g. `perflab memory record -- python script.py`")
        check_output(out, force=force, inputs=[a for a in cmd if Path(a).is_file()])
        found = find_target(cmd, target)
        run = record_command(cmd, out=out, target=found, max_entries=max_entries, force=force)
        if run.snapshot is None:
            raise PerflabError(f"no snapshot written: {run.explain_missing(found)}")
        typer.echo(f"wrote {run.snapshot} (the command exited with status {run.returncode}); read it with "
                   f"`perflab doctor {run.snapshot}`")
        if run.returncode:
            raise SystemExit(run.returncode)

    app.add_typer(memory, name="memory")
