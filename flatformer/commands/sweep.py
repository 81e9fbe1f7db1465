"""`flatformer sweep`: train the product of a sweep file's axes, locally or on Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import FlatformerError
from ..tasks.base import LEARNED
from .app import app, out, progress_display


@app.command()
def sweep(
    sweep_file: Path = typer.Argument(..., help="A sweep file (TOML); see examples/sweep.toml."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Sweep folder [runs/FILE-STEM]."),
    workers: Optional[int] = typer.Option(
        None, help="Local processes [number of cores]; with --ray auto, the local instance's CPUs."
    ),
    ray: Optional[str] = typer.Option(
        None,
        "--ray",
        help="Run the jobs as Ray tasks: a cluster's HEAD:6379, or auto for a local instance.",
    ),
):
    """Train every job of a sweep (tasks x presets x recipes x sets, each over the seed range),
    skipping finished ones; write DIR/results.csv and print a summary per configuration."""
    from ..sweep import expand, load_sweep, run_sweep, summarize

    folder = out_dir or Path("runs") / sweep_file.stem
    jobs = expand(load_sweep(sweep_file), folder)
    n_seeds = sum(j["seeds"][1] - j["seeds"][0] + 1 for j in jobs)
    progress = progress_display(
        TextColumn("{task.description:<6}"),
        BarColumn(bar_width=None),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    job_bar = progress.add_task("jobs", total=len(jobs), info="")
    seed_bar = progress.add_task("seeds", total=n_seeds, info="")
    counts = {"skipped": 0, "trained": 0, "failed": 0}
    shown = []

    def advance(job, result, status):
        if not shown:  # shown from the first job on, so a wrong --ray address still fails
            shown.append(True)  # with one line
            progress.start()
        counts[status] += 1
        progress.advance(job_bar)
        progress.advance(seed_bar, job["seeds"][1] - job["seeds"][0] + 1)
        progress.update(job_bar, info=", ".join(f"{v} {k}" for k, v in counts.items() if v))
        if status == "failed":
            progress.console.print(
                f"{job['name']}: {result['error']}", markup=False, highlight=False
            )

    try:
        rows, failed = run_sweep(
            sweep_file,
            folder,
            workers,
            ray,
            advance,
            note=lambda line: progress.console.print(
                line, markup=False, highlight=False, soft_wrap=True
            ),
        )
    finally:
        progress.stop()
    summary = summarize(rows)
    # Overrides every configuration shares (say steps=...) are said once, under the table.
    overrides = [set(c["overrides"].split()) for c in summary]
    shared = set.intersection(*overrides) if overrides else set()
    caption = f"learned: seeds at rule error <= {LEARNED:.0%}; s: the job's seconds"
    if shared:
        caption += f"; every job: {' '.join(sorted(shared))}"
    table = Table(box=box.SIMPLE_HEAD, padding=0, caption=caption)
    for heading in ("task", "preset", "recipe"):
        table.add_column(heading, no_wrap=True)
    table.add_column("overrides", overflow="fold", min_width=9)  # the one that may wrap
    for heading in ("learned", "median\nrule err", "worst\nrule err", "s"):
        table.add_column(
            heading, justify="right", no_wrap=True, min_width=max(map(len, heading.split("\n")))
        )
    for c in summary:
        table.add_row(
            c["task"],
            c["preset"],
            c["recipe"],
            " ".join(o for o in c["overrides"].split() if o not in shared),
            f"{c['learned']}/{c['seeds']}",
            f"{c['median_rule_error']:.1%}",
            f"{c['worst_rule_error']:.1%}",
            f"{c['seconds']:.1f}",
        )
    out.print(table)
    out.print(
        f"{folder / 'results.csv'}: {len(rows)} seeds in {len(jobs)} jobs "
        f"({counts['trained']} trained now, {counts['skipped']} finished before)"
    )
    if failed:
        raise FlatformerError(
            f"{len(failed)} of {len(jobs)} jobs failed (rerun the sweep to "
            f"retry them); first: {failed[0]}"
        )
