"""The main job: train the paper's model, draw its figures and movies, write the explorer, the
analysis and a report that links them all. A library function over `pipeline`'s stages: it
prints nothing and imports nothing from the command layer; `commands/reproduce.py` shows it."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import FlatformerError
from .pipeline import (
    Progress,
    draw_suite,
    quiet,
    train_job,
    write_analysis,
    write_explorer,
    write_movies,
)
from .report import step_headlines

STAGES = ["train", "figures", "movies", "explorer", "analysis", "report"]


def prepare_folder(out_dir: Path, wanted: dict, force: bool) -> bool:
    """True when `out_dir` already holds this very run (resume it); refuses a different run
    unless `force`, which clears it."""
    from ..store.run import has_run, holds_config
    from ..store.write import refuse_links

    run = Path(out_dir) / "run"
    if not has_run(run):
        if Path(out_dir).is_dir() and any(Path(out_dir).iterdir()) and not force:
            raise FlatformerError(
                f"{out_dir} is not empty and holds no flatformer run; pass "
                f"--force to write into it or choose another --out"
            )
        return False
    if holds_config(run, wanted):
        return True
    if not force:
        raise FlatformerError(
            f"{out_dir} holds a different run; pass --force to replace it or choose another --out"
        )
    refuse_links(run)  # removed below: never what a link points to
    shutil.rmtree(run)  # only what reproduce wrote: other files stay
    for name in ("analysis.json", "report.html"):
        (Path(out_dir) / name).unlink(missing_ok=True)
    return False


@dataclass
class Reproduced:
    """What the main job made: the report, the analysis it measured, each stage's seconds, the
    figures the model cannot have (with why) and a summary of about ten lines to print."""

    report: Path
    analysis: dict
    times: list[tuple[str, float]]
    skipped: list[str]
    summary: list[str]


def reproduce(
    task: str = "plus-last-even",
    preset: str | None = None,
    out_dir: Path = Path("runs/reproduce"),
    force: bool = False,
    progress: Progress = quiet,
    overrides: dict | None = None,
) -> Reproduced:
    """Train, draw, animate, export, analyse and report into `out_dir`, resuming the same run.

    Besides each stage's own reports, `progress` gets ("reproduce", i, 6, "STAGE: what") as
    stage i of the six begins. `overrides` change model or recipe fields, as in `JobSpec`."""
    from ..training.jobs import JobSpec
    from .report import Report, write_report
    from ..store.runs import load_run

    out_dir = Path(out_dir)
    run_dir = out_dir / "run"
    job, _ = JobSpec(task, preset, out_dir=run_dir, overrides=dict(overrides or {})).build()
    resume = prepare_folder(out_dir, job.run_config(0), force)
    times: list[tuple[str, float]] = []

    def stage(i: int, what: str):
        progress("reproduce", i, len(STAGES), f"{STAGES[i - 1]}: {what}")
        return time.perf_counter()

    start = stage(1, f"{job.task.name}, {job.cfg.n_params} parameters, into {run_dir}")
    train_job(job, resume, progress)
    times.append(("train", time.perf_counter() - start))
    run = load_run(run_dir)

    start = stage(2, "the paper's figure suite")
    _, _, written, skipped = draw_suite(run_dir, formats=["png"], progress=progress)
    figures = sorted((p for p in written if p.suffix == ".png"), key=lambda p: p.name)
    times.append(("figures", time.perf_counter() - start))

    start = stage(3, "learning-dynamics movies, one frame per checkpoint")
    movies, _ = write_movies(run_dir, progress=progress)
    times.append(("movies", time.perf_counter() - start))

    start = stage(4, "the live explorer")
    explorer = write_explorer(run, run_dir / "explorer.html", progress)
    times.append(("explorer", time.perf_counter() - start))

    start = stage(5, "interventions, lenses, circuits and the algorithm measured")
    analysis = write_analysis(run, out_dir / "analysis.json", progress)
    times.append(("analysis", time.perf_counter() - start))

    start = stage(6, "the report")
    mp4s = [p for paths in movies.values() for p in paths if p.suffix == ".mp4"]
    rows = [
        {"step": r["step"], "measure": r["measure"], "value": r["shown"]}
        for r in analysis.get("algorithm") or []
    ]
    report = Report(run, times, figures, mp4s, rows, explorer, circuit=analysis["edge_circuit"])
    times.append(("report", time.perf_counter() - start))
    path = write_report(report, out_dir / "report.html")
    return Reproduced(
        path, analysis, times, skipped, summary(run, analysis, times, path, figures, mp4s, explorer)
    )


def summary(run, analysis: dict, times, report: Path, figures, movies, explorer) -> list[str]:
    """About ten lines: the headline numbers, the algorithm step by step (the first measure
    of each step), and where everything is. `flatformer analyze` prints the full tables."""
    final = run.metrics[-1]
    lines = [
        f"done in {sum(t for _, t in times):.0f} s: {run.config['task']}, "
        f"{run.config.get('preset', 'custom')} ({run.cfg.n_params} parameters), step "
        f"{final['step']}: held-out rule error {final['rule_error']:.2%}, loss "
        f"{final['val_loss']:.4f}"
    ]
    for row in step_headlines(analysis.get("algorithm") or []):
        lines.append(f"  {row['step']}: {row['measure']}: {row['shown']}")
    found = analysis.get("edge_circuit")
    if found:
        c = found["circuit"]
        faith = "-" if c["faithfulness"] is None else f"{c['faithfulness']:.3f}"
        lines.append(
            f"  circuit: {c['edges_kept']} of {c['edges_total']} edges keep {faith} "
            f"of the {found['metric']}"
        )
    folder = figures[0].parent if figures else run.path / "figures"
    lines += [
        f"report    {report}",
        f"explorer  {explorer}",
        f"figures   {folder}/ ({len(figures)})",
        f"movies    {run.path / 'movies'}/ ({len(movies)} MP4, each with a GIF)",
        f"analysis  {report.parent / 'analysis.json'} (the tables: flatformer analyze {run.path})",
    ]
    return lines
