"""Sweeps: the product of tasks x presets x recipes x override groups, each trained over a seed
range, locally in a process pool or as Ray tasks on a cluster.

A sweep file (TOML) names the axes:

    tasks = ["plus-last-even"]
    presets = ["paper-2d"]              # optional: each task's own preset
    recipes = ["paper", "default"]
    seeds = "0-63"
    sets = [{}, {lr = 0.003}]           # optional: override groups, one more axis
    [set]                               # optional: overrides for every job
    steps = 20000

Each point of the product is one job: a `jobs.JobSpec` (its overrides the TOML values, typed)
built into one batched `train.Job` over the seed range, written as ordinary run folders
DIR/<job>/seed_S/. A job is finished when every seed's final checkpoint
exists and its `done.json` (written last, atomically) matches the job; rerunning a sweep skips
finished jobs and resumes the others from their checkpoints, so a killed sweep loses at most the
work of the jobs in flight. The driver gathers one row per seed into DIR/results.csv.

plan.py reads the sweep file and expands its jobs; worker.py trains one job and runs jobs in a
local process pool; cluster.py runs them as Ray tasks; results.py writes, reads and summarises
results.csv; driver.py ties them together (`run_sweep`).
"""

from .cluster import connect_ray
from .driver import check_sweep_fits, run_sweep
from .plan import AXES, MAX_JOBS, MAX_SWEEP_BYTES, expand, load_sweep, spec
from .results import COLUMNS, read_results, results_csv, summarize
from .worker import finished, run_job

__all__ = [
    "AXES",
    "COLUMNS",
    "MAX_JOBS",
    "MAX_SWEEP_BYTES",
    "check_sweep_fits",
    "connect_ray",
    "expand",
    "finished",
    "load_sweep",
    "read_results",
    "results_csv",
    "run_job",
    "run_sweep",
    "spec",
    "summarize",
]
