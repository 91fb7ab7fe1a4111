"""perflab CLI: kernels commands (placeholder until its issue lands)."""
import typer


def register(app: typer.Typer) -> None:
    pass
