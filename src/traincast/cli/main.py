"""The `traincast` command line: parse, call the library, render.

Each sub-command is a thin wrapper over a library call. Command groups live in
sibling modules that expose ``register(app)``; this module collects them and
turns every ``TraincastError`` into a one-line message and exit code 2.
"""

from __future__ import annotations

import errno
import sys

import typer

from traincast.errors import TraincastError

app = typer.Typer(
    name="traincast",
    help="Forecast the time and cost of training deep-learning models, and pick the hardware.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


_registered = False


def _register_all() -> None:
    """Add every command group to ``app``, once: a second call adds nothing (typer would list each command
    again, and every later invocation would build all the copies)."""
    global _registered
    if _registered:
        return
    from traincast.cli import commands

    commands.register(app)
    for name in ("bench", "calibrate", "learn", "online", "plan", "serve", "parallel"):
        __import__(f"traincast.cli.{name}", fromlist=["register"]).register(app)
    _registered = True


def run(argv: list[str] | None = None, the_app: typer.Typer | None = None) -> int:
    """Run the CLI on ``argv``; return the exit code instead of exiting.

    A ``TraincastError`` becomes ``error: <message>`` on stderr and code 2, and so does a file that cannot be
    read or written (a folder given for a file, a missing folder, a file that is not UTF-8 text).
    """
    the_app = the_app or app
    try:
        rv = the_app(args=argv, standalone_mode=False, prog_name="traincast")
    except TraincastError as exc:
        typer.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except typer.Exit as exc:  # raised by commands to set a code
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return 130
    except UnicodeDecodeError as exc:  # a binary or non-UTF-8 file where text was expected
        typer.echo(f"error: a file given is not UTF-8 text ({exc.reason} at byte {exc.start})", err=True)
        return 2
    except OSError as exc:  # a folder where a file was expected, a missing folder to write into, no permission
        name = str(exc.filename) if exc.filename is not None else None
        if exc.errno == errno.ENAMETOOLONG and name is not None:  # a long name tried as a path first
            typer.echo(f"error: {name[:48]!r}... ({len(name)} characters) is too long for a file name and names "
                       "nothing traincast knows (a model, GPU, job or file)", err=True)
            return 2
        where = f"{name}: " if name is not None else ""
        typer.echo(f"error: {where}{exc.strerror or exc}", err=True)
        return 2
    except Exception as exc:  # click's usage errors (typer may vendor its own click)
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            return exc.exit_code
        raise
    # without standalone mode click returns the code of a typer.Exit instead of raising it
    return rv if isinstance(rv, int) else 0


def main() -> None:
    _register_all()
    sys.exit(run())
