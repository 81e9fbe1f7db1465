"""`flatformer atlas`: train and measure an atlas (a sweep file with random draws), then draw
its phase diagram as a figure and an offline page."""

from __future__ import annotations

import io
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import FlatformerError
from .app import app, out
from .sweep import JobProgress


@app.command()
def atlas(
    atlas_file: Path = typer.Argument(
        ..., help="An atlas file (TOML): a sweep file with an optional [draw] table."
    ),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Atlas folder [runs/FILE-STEM]."),
    workers: Optional[int] = typer.Option(
        None, help="Local processes [number of cores]; with --ray auto, the local instance's CPUs."
    ),
    ray: Optional[str] = typer.Option(
        None,
        "--ray",
        help="Run the jobs as Ray tasks: a cluster's HEAD:6379, or auto for a local instance.",
    ),
    sets: Optional[List[str]] = typer.Option(
        None, "--set", help="key=value for every job (added to the file's [set]), repeatable."
    ),
    draws: Optional[int] = typer.Option(
        None,
        help="Only the first N draws of [draw] [its n_runs]; the same draws whatever N, so a "
        "larger N later adds runs.",
    ),
    explore: int = typer.Option(
        1, help="Checkpoints in each run's explorer page (0: write no pages)."
    ),
    x: str = typer.Option("attn_coeff", help="The diagram's columns: a results.csv column."),
    y: Optional[str] = typer.Option(None, help="The diagram's rows: a results.csv column."),
    bins: int = typer.Option(10, help="Bins of x (and of y, when it takes many values)."),
):
    """Train every run of an atlas (skipping measured ones), measure which mechanism each
    learned, and write DIR/results.csv, DIR/atlas.png and DIR/atlas.html."""
    from ..atlas import phase_diagram, plan_atlas, run_atlas
    from ..figures.atlas import draw_phase_diagram
    from ..figures.style import DPI
    from ..explorer.atlas_page import atlas_html
    from ..training.jobs import parse_sets
    from ..store.write import atomic_write

    folder = out_dir or Path("runs") / atlas_file.stem
    overrides = parse_sets(sets or [])
    jobs = plan_atlas(atlas_file, folder, overrides, explore, draws)
    shown = JobProgress(jobs, "runs")
    try:
        rows, failed = run_atlas(
            atlas_file,
            folder,
            workers,
            ray,
            shown.advance,
            note=shown.note,
            jobs=jobs,
        )
    finally:
        shown.display.stop()
    out.print(
        f"{folder / 'results.csv'}: {len(rows)} runs in {len(jobs)} jobs "
        f"({shown.counts['trained']} trained now, {shown.counts['skipped']} finished before)"
    )
    if any(r.get("mechanism") for r in rows):
        diagram = phase_diagram(rows, x, y, bins)
        fig = draw_phase_diagram(diagram)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
        atomic_write(folder / "atlas.png", buffer.getvalue())
        page = atlas_html(diagram, atlas_file.stem, "explorer.html" if explore else None)
        atomic_write(folder / "atlas.html", page.encode("utf-8"))
        shares = diagram["counts"].sum((0, 1))
        out.print(
            f"{folder / 'atlas.html'}, {folder / 'atlas.png'}: "
            + ", ".join(f"{int(n)} {k}" for k, n in zip(diagram["kinds"], shares))
        )
    if failed:
        raise FlatformerError(
            f"{len(failed)} of {len(jobs)} jobs failed (rerun the atlas to "
            f"retry them); first: {failed[0]}"
        )
