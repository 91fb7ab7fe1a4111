"""The perflab command line. Command groups live in perflab.cli.*; each has register(app)."""
from __future__ import annotations

import importlib
import os
import sys

import typer

from perflab.errors import PerflabError

# Each module adds its commands to the app; adding a module here adds its commands.
COMMAND_MODULES = ("puzzles", "doctor", "kernels", "toolkit", "diff", "scale", "memory", "stats", "sql")


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="perflab",
        help="GPU inference profiling: puzzles, the doctor, and a toolkit for your own code.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"perflab.cli.{name}")
        module.register(app)
    return app


def main(argv: list[str] | None = None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--debug"]
    app = build_app()
    try:
        # standalone_mode=False: click returns typer.Exit's code instead of raising it.
        result = app(args=args, prog_name="perflab", standalone_mode=False)
        if isinstance(result, int) and not isinstance(result, bool):
            return result
    except PerflabError as exc:
        if debug or os.environ.get("PERFLAB_DEBUG"):
            raise
        print(f"perflab: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("perflab: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # typer.Exit and friends
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except Exception as exc:  # click usage errors and anything unexpected: one line, not a traceback
        # typer may vendor its own click (typer._click), so recognise click's exceptions by name.
        kinds = {cls.__name__ for cls in type(exc).__mro__}
        if "Exit" in kinds:
            return int(getattr(exc, "exit_code", 0) or 0)
        if "ClickException" in kinds:
            exc.show()
            return 2
        if "Abort" in kinds:
            print("perflab: aborted", file=sys.stderr)
            return 1
        if debug or os.environ.get("PERFLAB_DEBUG"):
            raise
        print(f"perflab: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
