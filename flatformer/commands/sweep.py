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
    shown = JobProgress(jobs, "seeds")
    try:
        rows, failed = run_sweep(
            sweep_file,
            folder,
            workers,
            ray,
            shown.advance,
            note=shown.note,
        )
    finally:
        shown.display.stop()
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
        f"({shown.counts['trained']} trained now, {shown.counts['skipped']} finished before)"
    )
    if failed:
        raise FlatformerError(
            f"{len(failed)} of {len(jobs)} jobs failed (rerun the sweep to "
            f"retry them); first: {failed[0]}"
        )


class JobProgress:
    """What a sweep or an atlas shows while its jobs run: a bar of jobs (with how many were
    skipped, trained and failed) above a bar of their seeds, started at the first finished job
    (so a wrong --ray address still fails with one line), each failure printed as it comes."""

    def __init__(self, jobs: list[dict], unit: str):
        self.display = progress_display(
            TextColumn("{task.description:<6}"),
            BarColumn(bar_width=None),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
        )
        n = sum(j["seeds"][1] - j["seeds"][0] + 1 for j in jobs)
        self.job_bar = self.display.add_task("jobs", total=len(jobs), info="")
        self.seed_bar = self.display.add_task(unit, total=n, info="")
        self.counts = {"skipped": 0, "trained": 0, "failed": 0}
        self.shown = False

    def advance(self, job, result, status):
        if not self.shown:
            self.shown = True
            self.display.start()
        self.counts[status] += 1
        self.display.advance(self.job_bar)
        self.display.advance(self.seed_bar, job["seeds"][1] - job["seeds"][0] + 1)
        info = ", ".join(f"{v} {k}" for k, v in self.counts.items() if v)
        self.display.update(self.job_bar, info=info)
        if status == "failed":
            self.note(f"{job['name']}: {result['error']}")

    def note(self, line: str):
        self.display.console.print(line, markup=False, highlight=False, soft_wrap=True)
