"""The driver: check that a sweep fits, run its unfinished jobs (in local processes or on Ray)
and gather their rows into DIR/results.csv."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Callable

from ..errors import FlatformerError
from ..store.limits import processes
from ..store.lock import hold
from .cluster import _ray_session, _run_ray, _split_address
from .plan import _build, _pairs, expand, load_sweep
from .results import results_csv
from .worker import _run_local, finished, run_job


def check_sweep_fits(jobs: list[dict], out_dir: Path, workers: int, local: bool) -> str:
    """Refuse before anything runs a sweep whose jobs do not fit: each job in its share of this
    machine's memory (when the jobs run here), and all of them on the sweep folder's disk.
    Returns the estimate as a line to show."""
    from ..store.resources import available_memory, check_fits, estimate, free_disk, gb

    built = [_build(job)[0] for job in jobs]
    memory = available_memory()
    share = None if memory is None or not local else memory // max(1, min(workers, len(jobs)))
    for job, b in zip(jobs, built):
        try:
            check_fits(b, memory=share if local else 2**62, disk=2**62)
        except FlatformerError as exc:
            raise FlatformerError(
                f"job {job['name']}, one of {min(workers, len(jobs))} at a time: {exc}"
            ) from None
    need, free = sum(estimate(b).disk for b in built), free_disk(out_dir)
    if need > free:
        raise FlatformerError(
            f"the sweep's {len(jobs)} unfinished jobs write about {gb(need)} "
            f"but {gb(free)} is free under {out_dir}; raise checkpoint_every "
            f"in the sweep file's [set] or run fewer seeds"
        )
    peak = max((estimate(b).memory for b in built), default=0)
    return (
        f"estimate: {len(jobs)} unfinished jobs, {min(workers, len(jobs))} at a time, the "
        f"largest about {gb(peak)} of memory; about {gb(need)} to write"
    )


def run_sweep(
    path,
    out_dir,
    workers: int | None = None,
    ray: str | None = None,
    progress: Callable[[dict, dict, str], None] | None = None,
    note: Callable[[str], None] = lambda line: None,
):
    """Run every unfinished job of the sweep file; write DIR/results.csv. Returns its rows and
    the failed jobs' one-line errors (a failed job has no rows; a rerun retries it).

    `progress(job, result, status)` is called once per job, status "skipped" (finished
    before), "trained" or "failed" (result {"error": ...}).
    """
    jobs = expand(load_sweep(path), out_dir)
    table = []

    def results_table(results: dict) -> str:
        table[:] = sweep_rows(jobs, results)
        return results_csv(table)

    _, failed = run_jobs(jobs, out_dir, workers, ray, progress, note, table=results_table)
    return table, failed


def sweep_rows(jobs: list[dict], results: dict) -> list[dict]:
    """results.csv's rows: one per seed of every finished job, in sweep order."""
    return [
        dict(
            job=job["name"],
            task=job["task"],
            preset=job["preset"],
            recipe=job["recipe"],
            overrides=" ".join(_pairs(job["overrides"])),
            seed=r["seed"],
            steps=r["step"],
            train_loss=r["train_loss"],
            val_loss=r["val_loss"],
            rule_error=r["rule_error"],
            job_seconds=round(results[job["name"]]["seconds"], 3),
        )
        for job in jobs
        if job["name"] in results
        for r in results[job["name"]]["rows"]
    ]


def run_jobs(
    jobs: list[dict],
    out_dir,
    workers: int | None = None,
    ray: str | None = None,
    progress: Callable[[dict, dict, str], None] | None = None,
    note: Callable[[str], None] = lambda line: None,
    work: Callable[[dict], dict] = run_job,
    done: Callable[[dict], dict | None] = finished,
    table: Callable[[dict], str] | None = None,
) -> tuple[dict, list[str]]:
    """Run the expanded `jobs` that `done` does not find finished, with `work` (run_job, or a
    function of its contract: a job in, its result or {"error": ...} out), in local processes
    or on Ray, holding the sweep folder; then write DIR/results.csv as `table(results)` makes
    it. Returns {job name: result} of every finished job and the failed jobs' one-line errors.
    """
    from ..store.write import atomic_write, claim_folder, make_folder

    workers = (os.cpu_count() or 1) if workers is None else workers
    processes("--workers", workers)
    if ray and ray != "auto":
        _split_address(ray)
    names = {job["name"] for job in jobs}
    # Ours: it holds a sweep's sweep.json, or only folders named after this sweep's jobs.
    out_dir = claim_folder(
        out_dir,
        "sweep folder",
        lambda f: (
            (Path(f) / "sweep.json").is_file()
            or all(e.is_dir(follow_symlinks=False) and e.name in names for e in os.scandir(f))
        ),
    )
    make_folder(out_dir, "sweep folder")
    with hold(out_dir, "a sweep"):
        atomic_write(out_dir / "sweep.json", (json.dumps(jobs, indent=1) + "\n").encode())
        results = {job["name"]: result for job in jobs if (result := done(job))}
        todo = [job for job in jobs if job["name"] not in results]
        estimate = todo and check_sweep_fits(
            todo, out_dir, workers, local=ray is None or ray == "auto"
        )
        failed = []
        # Connect first: a wrong address fails before anything is reported.
        with _ray_session(ray, workers) if ray and todo else contextlib.nullcontext():
            if estimate:
                note(estimate)
            for job in jobs:
                if progress and job["name"] in results:
                    progress(job, results[job["name"]], "skipped")
            ran = _run_ray(todo, work) if ray else _run_local(todo, workers, work)
            for job, result in ran:
                if "error" in result:
                    failed.append(f"{job['name']}: {result['error']}")
                else:
                    results[job["name"]] = result
                if progress:
                    progress(job, result, "failed" if "error" in result else "trained")
        if table is not None:
            atomic_write(out_dir / "results.csv", table(results).encode())
    return results, failed
