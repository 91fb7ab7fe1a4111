"""perflab CLI: puzzles commands (placeholder until its issue lands)."""
import typer


def register(app: typer.Typer) -> None:
    pass
