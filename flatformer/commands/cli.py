"""The `flatformer` command. Library code raises FlatformerError; only this layer prints.

The application and its consoles live in `commands/app.py`; every module of `commands/` adds
its commands to it, and `main` loads them all (cli -> commands, never back)."""

from __future__ import annotations

import sys

import typer

from .app import app, console
from ..errors import FlatformerError


def load_commands():
    """Import every module in flatformer/commands, each adding its commands to `app`."""
    import importlib
    import pkgutil

    from .. import commands

    first = ["train", "reproduce"]  # --help lists the everyday commands first
    names = sorted(info.name for info in pkgutil.iter_modules(commands.__path__))
    for name in first + [n for n in names if n not in first]:
        importlib.import_module(f"{commands.__name__}.{name}")


def say_error(message: str):
    console.print(f"flatformer: error: {message}", markup=False, highlight=False, soft_wrap=True)


def refuse_empty_arguments(argv: list[str]):
    """An empty argument ('' from an unset shell variable, say) would become the current
    folder as a path: every value we take is non-empty."""
    for i, arg in enumerate(argv):
        if arg == "":
            after = f" after {argv[i - 1]}" if i else ""
            raise FlatformerError(f"an empty argument{after}: give a value")


def main(argv: list[str] | None = None):
    """The `flatformer` command (argv: the arguments, default sys.argv[1:])."""
    try:  # typer >= 0.20 carries its own copy of click
        from typer._click import exceptions as click
    except ImportError:
        from click import exceptions as click
    load_commands()
    argv = sys.argv[1:] if argv is None else argv
    import numpy as np

    np.seterr(all="ignore")  # a diverging run is reported once, by the trainer's NaN check
    try:
        refuse_empty_arguments(argv)
        # Not standalone: click's own usage errors (a bad option value) come here too, and are
        # said in the same one line as every other refusal.
        code = app(args=argv, prog_name="flatformer", standalone_mode=False)
    except click.NoArgsIsHelpError as exc:
        exc.show()  # the help text, as `flatformer` alone has always shown
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = f" (see {exc.ctx.command_path} --help)" if exc.ctx else ""
        say_error(f"{' '.join(exc.format_message().split())}{where}")
        sys.exit(2)
    except click.ClickException as exc:
        say_error(" ".join(exc.format_message().split()))
        sys.exit(exc.exit_code or 2)
    except FlatformerError as exc:
        say_error(str(exc))
        sys.exit(2)
    except OSError as exc:
        say_error(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
        sys.exit(2)
    except (KeyboardInterrupt, typer.Abort):
        console.print("flatformer: interrupted (a training run continues with --resume)")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
