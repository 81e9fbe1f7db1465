"""`flatformer animate`: the learning-dynamics movies of a run, one frame per checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .app import ProgressDisplay, app, console, out


@app.command()
def animate(
    run: Path = typer.Argument(..., help="A run folder."),
    fmt: Optional[str] = typer.Option(
        None, "--format", help="Formats, comma-separated: mp4,gif [both]."
    ),
    movies: Optional[str] = typer.Option(
        None,
        "--movies",
        help="Movies, comma-separated: "
        "mov1_embeddings, mov2_landscape, mov3_qkv, "
        "mov4_qk_space, mov5_qk_attention, mov6_spectrum "
        "(modular-addition runs only), "
        "mov7_induction_attention (induction runs only) (or "
        "mov1..mov7, or 1..7) [all this run can have].",
    ),
    fps: int = typer.Option(20, help="Frames per second."),
    head: int = typer.Option(0, help="Attention head drawn (block 0)."),
    workers: int = typer.Option(2, help="Rendering processes."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Output folder [RUN/movies]."),
    every: int = typer.Option(
        1,
        help="One frame per EVERY-th checkpoint (the last always kept): fewer frames, less memory.",
    ),
):
    """Learning-dynamics movies (MP4 and GIF), one frame per checkpoint."""
    from ..publish.pipeline import write_movies

    started = time.perf_counter()
    with ProgressDisplay({"movies": "frames"}) as progress:
        written, skipped = write_movies(
            run,
            movies,
            fmt,
            fps,
            head,
            workers,
            out_dir,
            progress,
            every,
            note=lambda line: console.print(line, markup=False, highlight=False),
        )
    for name, reason in skipped.items():
        console.print(f"skipping {name}: {reason}", markup=False, highlight=False)
    paths = [p for ps in written.values() for p in ps]
    kinds = [p.suffix[1:] for p in next(iter(written.values()))]
    table = Table("movie", *kinds, box=None)
    for name, ps in written.items():
        table.add_row(name, *(f"{p.stat().st_size / 1e6:.1f} MB" for p in ps))
    out.print(table)
    out.print(
        f"{paths[0].parent}: {len(written)} movies in {time.perf_counter() - started:.1f} s",
        soft_wrap=True,
    )
