"""`flatformer animate`: the learning-dynamics movies of a run, one frame per checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.progress import (BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table

from ..cli import app, console, out, progress_display
from ..errors import FlatformerError
from ..limits import processes

MAX_FPS = 50  # browsers play GIF delays under 20 ms at 100 ms, so faster GIFs would be slower


def write_movies(run_dir: Path, movies: str | None = None, formats: str | None = None,
                 fps: int = 20, head: int = 0, workers: int = 2,
                 out_dir: Path | None = None) -> dict[str, list[Path]]:
    """Render the movies of the run in `run_dir` to `out_dir` (default RUN/movies), with a
    progress bar on the console; returns {movie: [paths]}. Also used by `flatformer reproduce`."""
    if not 1 <= fps <= MAX_FPS:
        raise FlatformerError(f"--fps must be between 1 and {MAX_FPS}, got {fps}")
    processes("--workers", workers)
    from .. import movies as mv
    from ..runs import load_run
    run = load_run(run_dir)
    names = mv.movie_names(movies, run.config.get("task"))
    chosen = mv.formats(formats)
    with console.status("loading checkpoints and computing every frame"):
        ck = mv.load_checkpoints(run)
        scenes, skipped = mv.prepare(ck, names, head)
    for name, reason in skipped.items():
        console.print(f"skipping {name}: {reason}", markup=False, highlight=False)
    if not scenes:
        raise FlatformerError("none of the requested movies can be made for this run")
    folder = Path(out_dir) if out_dir else run.path / "movies"
    total = sum(len(s) for s in scenes)
    progress = progress_display(TextColumn(f"{len(scenes)} movies x {len(ck)} frames"),
                                BarColumn(bar_width=None), MofNCompleteColumn(),
                                TextColumn("frames"), TimeElapsedColumn(), TimeRemainingColumn())
    bar = progress.add_task("frames", total=total)
    with progress:
        written = mv.render(scenes, folder, chosen, fps, workers,
                            progress=lambda done: progress.update(bar, completed=done))
    return written


@app.command()
def animate(
    run: Path = typer.Argument(..., help="A run folder."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Formats, comma-separated: "
                                      "mp4,gif [both]."),
    movies: Optional[str] = typer.Option(None, "--movies", help="Movies, comma-separated: "
                                         "mov1_embeddings, mov2_landscape, mov3_qkv, "
                                         "mov4_qk_space, mov5_qk_attention, mov6_spectrum "
                                         "(modular-addition runs only) (or mov1..mov6, or "
                                         "1..6) [all this run can have]."),
    fps: int = typer.Option(20, help="Frames per second."),
    head: int = typer.Option(0, help="Attention head drawn (block 0)."),
    workers: int = typer.Option(2, help="Rendering processes."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Output folder [RUN/movies]."),
):
    """Learning-dynamics movies (MP4 and GIF), one frame per checkpoint."""
    started = time.perf_counter()
    written = write_movies(run, movies, fmt, fps, head, workers, out_dir)
    paths = [p for ps in written.values() for p in ps]
    kinds = [p.suffix[1:] for p in next(iter(written.values()))]
    table = Table("movie", *kinds, box=None)
    for name, ps in written.items():
        table.add_row(name, *(f"{p.stat().st_size / 1e6:.1f} MB" for p in ps))
    out.print(table)
    out.print(f"{paths[0].parent}: {len(written)} movies in {time.perf_counter() - started:.1f} s",
              soft_wrap=True)
