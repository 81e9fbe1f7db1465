"""`flatformer figures`: draw the paper's figure suite for one checkpoint of a run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from ..store.limits import processes
from .app import ProgressDisplay, app, console, out


@app.command()
def figures(
    run: Path = typer.Argument(..., help="A run folder."),
    step: Optional[int] = typer.Option(None, help="Checkpoint step [last]."),
    sequence: Optional[str] = typer.Option(
        None, help='Space-separated tokens to trace [the task\'s demo, e.g. "4 1 + 4 6 9 5 +"].'
    ),
    fmt: str = typer.Option("png", "--format", help="Comma list of png, pdf, svg."),
    out_dir: Optional[Path] = typer.Option(
        None, "--out", help="Output folder [RUN/figures/step_XXXXXX]."
    ),
    only: Optional[str] = typer.Option(
        None, help="Comma list of figure names or prefixes, e.g. fig10,supp_qk_full."
    ),
    jobs: int = typer.Option(2, help="Processes drawing in parallel (1: no forking)."),
):
    """Draw the paper's figures (fig02 to fig15 and the supplementary ones) for a checkpoint;
    for modular-addition first its progress measures and embedding spectrum (grok01, grok02)."""
    from ..publish.pipeline import draw_suite, parse_formats

    formats = parse_formats(fmt)
    processes("--jobs", jobs)
    started = time.perf_counter()
    with ProgressDisplay(transient=True) as progress:
        ctx, folder, written, skipped = draw_suite(
            run, step, sequence, formats, out_dir, only, jobs, progress
        )
    for message in skipped:
        console.print(message, markup=False, highlight=False, soft_wrap=True)
    seconds = time.perf_counter() - started
    n = len(written) // len(formats)
    out.print(
        f"{folder}: {n} figures ({', '.join(formats)}) for step {ctx.step}, "
        f'sequence "{" ".join(ctx.trace.token_text)}" ({seconds:.1f} s)',
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
