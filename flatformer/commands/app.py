"""The command-line application every command module registers on, its two consoles, and the
progress display that pipeline callbacks feed. Command modules import from here, never from
`cli` (which imports them): the import graph has no cycle."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from .terminal import EscapeHook, shown

app = typer.Typer(
    help="flatformer: train a transformer small enough to see through, then look inside it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# Text printed is never read as rich markup (a path "[/x]" raised, "[link=...]" made a
# hyperlink), and control characters in it are shown escaped (terminal.py).
console = Console(stderr=True, markup=False)
out = Console(markup=False)
for _console in (console, out):
    _console.push_render_hook(EscapeHook())


def print_version(value: bool):
    if value:
        from .. import __version__

        print(f"flatformer {__version__}")
        raise typer.Exit()


@app.callback()
def options(
    version: bool = typer.Option(
        False,
        "--version",
        callback=print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
):
    pass


def progress_display(*columns, transient: bool = False) -> Progress:
    """A rich progress display that degrades gracefully. Outside a terminal (a pipe, a log, CI)
    it draws nothing, and the command's own lines say what happened; the bar takes the width
    left over by the text, and under 100 columns the time left goes, so that at 80 columns
    nothing is cut to `0:00:…`."""
    if console.width < 100:
        columns = tuple(c for c in columns if not isinstance(c, TimeRemainingColumn))
    return Progress(
        *columns,
        console=console,
        transient=transient,
        expand=True,
        disable=not console.is_interactive,
    )


class ProgressDisplay:
    """A `pipeline.Progress` callback drawn with rich: one bar per stage, shown from the stage's
    first report (so input refused before any work shows only its error) and stopped when the
    stage completes (so a stage that forks workers never forks a refresh thread). `labels`
    rename stages on screen. A "note" report is a line to keep (say, a capped run), printed
    above the bars."""

    def __init__(self, labels: dict[str, str] | None = None, transient: bool = False):
        self.labels, self.transient = labels or {}, transient
        self.display: Progress | None = None
        self.stage: str | None = None

    def __call__(self, stage: str, i: int, n: int, message: str):
        if stage == "note":
            console.print(message, markup=False, highlight=False, soft_wrap=True)
            return
        if stage != self.stage or self.display is None:
            self.close()
            self.display = progress_display(
                TextColumn("{task.description}"),
                BarColumn(bar_width=None),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}", markup=False),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=self.transient,
            )
            self.bar = self.display.add_task(
                self.labels.get(stage, stage), total=n or None, info=""
            )
            self.stage = stage
            self.display.start()
        # The bars are drawn by rich's live display, past the consoles' escaping hook
        self.display.update(self.bar, completed=i, total=n or None, info=shown(message))
        if n and i >= n:
            self.close()

    def close(self, failed: bool = False):
        if self.display is not None:
            if failed:  # the error is the one line to show: leave no bar behind
                self.display.live.transient = True
            self.display.stop()
        self.display, self.stage = None, None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        self.close(failed=kind is not None)
