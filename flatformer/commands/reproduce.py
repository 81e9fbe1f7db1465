"""`flatformer reproduce`: the main job, with a heading per stage and its progress."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.text import Text

from .app import ProgressDisplay, app, console, out


class StagedDisplay(ProgressDisplay):
    """The stages' bars, each under a heading "i/6 stage: what"."""

    def __call__(self, stage: str, i: int, n: int, message: str):
        if stage == "reproduce":
            self.close()
            head, _, rest = message.partition(":")
            # Styled as Text: the consoles read no markup (a path may hold "[/x]").
            console.rule(Text.assemble((f"{i}/{n} {head}", "bold"), f":{rest}"), align="left")
            return
        super().__call__(stage, i, n, message)


@app.command()
def reproduce(
    task: str = typer.Option("plus-last-even", help="Task name."),
    preset_name: Optional[str] = typer.Option(None, "--preset", help="Preset [task's]."),
    out_dir: Path = typer.Option(Path("runs/reproduce"), "--out", help="Output folder."),
    force: bool = typer.Option(False, help="Replace a different run in --out."),
    sets: Optional[List[str]] = typer.Option(
        None, "--set", help="Override a model or recipe field, as for train."
    ),
):
    """The main job: train the paper's model, draw its figures and movies, write the explorer,
    the analysis and DIR/report.html. Re-running resumes the same run."""
    from ..training.jobs import parse_sets
    from ..publish.reproduce import reproduce as run_all

    with StagedDisplay() as progress:
        done = run_all(task, preset_name, out_dir, force, progress, parse_sets(sets))
    for message in done.skipped:
        console.print(message, markup=False, highlight=False)
    for line in done.summary:  # the result: on stdout, so `reproduce > log` keeps it
        out.print(line, markup=False, highlight=False, soft_wrap=True)
