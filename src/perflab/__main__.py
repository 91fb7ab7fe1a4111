"""The perflab command line. Command groups live in perflab.cli.*; each has register(app)."""
from __future__ import annotations

import importlib
import os
import sys

import typer

from perflab.errors import PerflabError, one_line

# Each module adds its commands to the app; adding a module here adds its commands.
COMMAND_MODULES = ("puzzles", "doctor", "kernels", "toolkit", "investigate", "diff", "scale", "memory", "stats", "sql",
                   "taxonomy", "mcp")


HELP = "GPU inference profiling: puzzles, the doctor, and a toolkit for your own code."


def _show_version(value: bool) -> None:
    if value:
        from perflab import __version__

        typer.echo(f"perflab {__version__}")
        raise typer.Exit()


def build_app() -> typer.Typer:
    # add_completion: --install-completion / --show-completion (bash, zsh, fish, PowerShell), typer's own
    from perflab.cli import fast_params, flag_help

    fast_params.install()
    flag_help.install()
    app = typer.Typer(name="perflab", help=HELP, no_args_is_help=True, pretty_exceptions_enable=False,
                      add_completion=True)

    @app.callback()
    def options(version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                             help="Print perflab's version and exit.")) -> None:
        pass

    options.__doc__ = HELP
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
        print(f"perflab: error: {one_line(str(exc))}", file=sys.stderr)
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
        if "NoArgsIsHelpError" in kinds:  # `perflab` or `perflab memory` alone: the help is the answer
            return 0
        if "ClickException" in kinds:  # a usage error: one line, with where to read the usage
            ctx = getattr(exc, "ctx", None)
            where = f" (see {ctx.command_path} --help)" if ctx is not None and ctx.command_path else ""
            print(f"perflab: error: {' '.join(one_line(exc.format_message()).split())}{where}", file=sys.stderr)
            return getattr(exc, "exit_code", 2) or 2
        if "Abort" in kinds:
            print("perflab: aborted", file=sys.stderr)
            return 1
        if debug or os.environ.get("PERFLAB_DEBUG"):
            raise
        print(f"perflab: internal error: {type(exc).__name__}: {one_line(str(exc))} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
