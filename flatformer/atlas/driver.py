"""The atlas driver: expand the atlas file, train and measure its unmeasured jobs (the sweep's
machinery: local processes or Ray, a job's seeds trained as one batched program) and gather
one row per run into DIR/results.csv."""

from __future__ import annotations

from typing import Callable

from ..errors import FlatformerError
from ..sweep.driver import run_jobs, sweep_rows
from ..sweep.plan import _build
from .plan import expand_atlas, load_atlas
from .results import config_columns, results_csv
from .worker import measure_job, measured


def plan_atlas(
    path, out_dir, sets: dict | None = None, explore: int = 1, draws: int | None = None
) -> list[dict]:
    """The atlas file's jobs (each marked to write its runs' explorer pages with `explore`
    checkpoints; 0: none); with `draws`, its first `draws` draws in place of [draw]'s n_runs
    (a draw is the same whatever n_runs is, so a larger number later only adds runs)."""
    from ..store.limits import whole

    whole("--explore", explore, 0, 201)
    atlas = load_atlas(path, sets)
    if draws is not None:
        if "draw" not in atlas:
            raise FlatformerError(f"--draws needs a [draw] table; {path} has none")
        atlas["draw"] = {**atlas["draw"], "n_runs": whole("--draws", draws, 1, 10_000)}
    jobs = expand_atlas(atlas, out_dir)
    for job in jobs:
        job["explore"] = explore
    return jobs


def atlas_rows(jobs: list[dict], results: dict) -> list[dict]:
    """One row per run of every measured job: the sweep's columns, the draw, the config's
    knobs and the measures."""
    rows = []
    configs = {}
    for job in jobs:
        if job["name"] not in results:
            continue
        if job["name"] not in configs:
            configs[job["name"]] = config_columns(_build(job)[0])
        measures = {m["seed"]: m for m in results[job["name"]]["measures"]}
        for row in sweep_rows([job], results):
            rows.append(
                {
                    **row,
                    "job_cpu_seconds": results[job["name"]].get("cpu_seconds"),
                    "draw": "" if job.get("draw") is None else job["draw"],
                    **configs[job["name"]],
                    **{k: v for k, v in measures[row["seed"]].items() if k != "seed"},
                }
            )
    return rows


def run_atlas(
    path,
    out_dir,
    workers: int | None = None,
    ray: str | None = None,
    progress: Callable[[dict, dict, str], None] | None = None,
    note: Callable[[str], None] = lambda line: None,
    sets: dict | None = None,
    explore: int = 1,
    jobs: list[dict] | None = None,
):
    """Train and measure every unmeasured job of the atlas file; write DIR/results.csv.
    Returns its rows and the failed jobs' one-line errors (a rerun retries those).

    `progress(job, result, status)`: once per job, status "skipped" (measured before),
    "trained" or "failed"."""
    jobs = jobs if jobs is not None else plan_atlas(path, out_dir, sets, explore)
    table: list[dict] = []

    def results_table(results: dict) -> str:
        table[:] = atlas_rows(jobs, results)
        return results_csv(table)

    _, failed = run_jobs(
        jobs,
        out_dir,
        workers,
        ray,
        progress,
        note,
        work=measure_job,
        done=measured,
        table=results_table,
    )
    return table, failed
