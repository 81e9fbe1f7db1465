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
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from .errors import FlatformerError
from .limits import processes
from .lock import hold
from .tasks.base import LEARNED

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

AXES = {"tasks", "presets", "recipes", "seeds", "set", "sets"}
COLUMNS = ["job", "task", "preset", "recipe", "overrides", "seed", "steps", "train_loss",
           "val_loss", "rule_error", "job_seconds"]


def _names(sweep: dict, key: str, default: list) -> list:
    value = sweep.get(key, default)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise FlatformerError(f"{key} must be a non-empty list of names, got {value!r}")
    return value


def _overrides(table, where: str) -> dict:
    """A table of overrides, as `JobSpec.overrides` takes them (sorted by key)."""
    if not isinstance(table, dict):
        raise FlatformerError(f"{where} must be a table of overrides like {{lr = 0.003}}, "
                              f"got {table!r}")
    return dict(sorted(table.items()))


def _pairs(overrides: dict) -> list[str]:
    """Overrides as `--set` would spell them: `key=value`, values in JSON."""
    return [f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sorted(overrides.items())]


def load_sweep(path) -> dict:
    """The sweep file's contents, with a one-line error for bad TOML or unknown keys."""
    path = Path(path)
    try:
        sweep = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FlatformerError(f"sweep file {path} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FlatformerError(f"{path} is not valid TOML: {exc}") from None
    unknown = sorted(set(sweep) - AXES)
    if unknown:
        raise FlatformerError(f"{path}: unknown key {unknown[0]!r}; a sweep file takes "
                              f"{', '.join(sorted(AXES))}")
    if "tasks" not in sweep or "recipes" not in sweep or "seeds" not in sweep:
        raise FlatformerError(f"{path}: a sweep needs tasks, recipes and seeds")
    return sweep


def expand(sweep: dict, out_dir) -> list[dict]:
    """Every job of the sweep, in the order of its axes: plain dicts (they travel to worker
    processes and Ray tasks, and into done.json). Each is checked by building its Job."""
    from .jobs import parse_seeds
    from .tasks import get_task
    try:
        seeds = parse_seeds(str(sweep["seeds"]))
    except FlatformerError as exc:
        raise FlatformerError(f'seeds must be a range like "0-63" ({exc})') from None
    common = _overrides(sweep.get("set", {}), "set")
    groups = sweep.get("sets", [{}])
    if not isinstance(groups, list) or not groups:
        raise FlatformerError("sets must be a non-empty list of override tables, e.g. "
                              "[{}, {lr = 0.003}]")
    variants = [_overrides(g, "each entry of sets") for g in groups]
    out_dir = Path(out_dir).absolute()
    jobs, names = [], set()
    for task in _names(sweep, "tasks", []):
        presets = _names(sweep, "presets", [get_task(task).default_preset])
        for preset in presets:
            for recipe in _names(sweep, "recipes", []):
                for variant in variants:
                    # A variant's keys override the common ones; both are recorded in the job.
                    overrides = dict(sorted({**common, **variant}.items()))
                    name = ".".join([task, preset, recipe] + ([_label(variant)] if variant
                                                               else []))
                    if name in names:
                        raise FlatformerError(f"job {name} is repeated: the entries of sets "
                                              f"must differ")
                    if "/" in name:
                        raise FlatformerError(f"job name {name!r} has a '/': choose values "
                                              f"without one")
                    names.add(name)
                    job = {"name": name, "task": task, "preset": preset, "recipe": recipe,
                           "overrides": overrides, "seeds": [seeds[0], seeds[-1]],
                           "folder": str(out_dir / name), "sweep_dir": str(out_dir)}
                    try:
                        built, _ = _build(job)
                    except FlatformerError as exc:
                        raise FlatformerError(f"job {name}: {exc}") from None
                    job["steps"] = built.recipe.steps
                    jobs.append(job)
    return jobs


def _label(overrides: dict) -> str:
    """The folder-name part for overrides: `d_mlp=16,schedule=cosine` (strings unquoted)."""
    return ",".join(f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'))}"
                    for k, v in sorted(overrides.items()))


def spec(job: dict):
    """The `JobSpec` of one sweep job (a plain dict: it travels to workers and Ray tasks)."""
    from .jobs import JobSpec
    first, last = job["seeds"]
    return JobSpec(job["task"], job["preset"], job["recipe"], seeds=tuple(range(first, last + 1)),
                   out_dir=Path(job["folder"]), overrides=job["overrides"])


def _build(job: dict):
    return spec(job).build()


def _identity(job: dict) -> dict:
    """What makes a job this job (its folder may move with the sweep directory)."""
    return {k: job[k] for k in ("name", "task", "preset", "recipe", "overrides", "seeds",
                                "steps")}


def finished(job: dict) -> dict | None:
    """The job's done.json when the job is finished, else None. A done.json for a different
    job in the same folder is an error: the folder holds another sweep's runs."""
    from .runs import checkpoint_path
    folder = Path(job["folder"])
    try:
        done = json.loads((folder / "done.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if done.get("job") != _identity(job):
        raise FlatformerError(f"{folder} holds a different job ({done.get('job')}); choose "
                              f"another --out or delete it")
    first, last = job["seeds"]
    if all(checkpoint_path(folder / f"seed_{s}", job["steps"]).is_file()
           for s in range(first, last + 1)):
        return done
    return None


def run_job(job: dict) -> dict:
    """Train one job (resuming whatever a killed sweep left) and mark it done. Runs in a worker
    process or a Ray task; returns done.json's contents, or {"error": ...} for a problem the
    user can fix, so one bad configuration does not stop the others."""
    from .runs import atomic_write
    from .train import train
    try:
        if not (Path(job["sweep_dir"]) / "sweep.json").is_file():
            raise FlatformerError(f"{job['sweep_dir']} is not visible on this node; put the "
                                  f"sweep's --out on a filesystem every node shares")
        done = finished(job)
        if done is not None:
            return done
        started = time.perf_counter()
        built, _ = _build(job)
        trainer = train(built, resume=True)  # resume=True also starts a fresh folder afresh
        seconds = time.perf_counter() - started
    except FlatformerError as exc:
        return {"error": str(exc)}
    rows = [{"seed": seed, **{k: m[-1][k] for k in ("step", "train_loss", "val_loss",
                                                     "rule_error")}}
            for seed, m in zip(built.seeds, trainer.metrics)]
    done = {"job": _identity(job), "seconds": seconds, "rows": rows}
    atomic_write(Path(job["folder"]) / "done.json", (json.dumps(done) + "\n").encode())
    return done


def _watch_parent(parent: int):
    """Pool initializer: exit when the driver dies, even by SIGKILL, so an orphaned worker
    never keeps writing into folders a rerun is about to resume."""
    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def _run_local(jobs: list[dict], workers: int):
    """(job, result) pairs as jobs finish, `workers` processes at a time."""
    if workers == 1:
        for job in jobs:
            yield job, run_job(job)
        return
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    # spawn, not fork: the driver has a progress thread, and fork copies its locks mid-use.
    with ProcessPoolExecutor(workers, multiprocessing.get_context("spawn"),
                             initializer=_watch_parent, initargs=(os.getpid(),)) as pool:
        pending = {pool.submit(run_job, job): job for job in jobs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield pending.pop(future), future.result()


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FlatformerError(f"--ray takes HOST:PORT of a cluster's head (ray start --head "
                              f"prints it) or auto, got {address!r}")
    return host.strip("[]"), int(port)


def _check_reachable(address: str):
    """Fail fast on a wrong HOST:PORT: ray.init keeps retrying one for minutes."""
    import socket
    try:
        socket.create_connection(_split_address(address), timeout=5).close()
    except OSError as exc:
        raise FlatformerError(f"cannot reach a Ray head at {address} ({exc.strerror or exc}); "
                              f"start one with `ray start --head`") from None


def connect_ray(address: str, workers: int):
    """Connect to the Ray cluster at `address`, or with "auto" start a local instance of
    `workers` CPUs whose servers listen on 127.0.0.1 only and without a dashboard."""
    local = address == "auto"
    if not local:
        _check_reachable(address)
    # On Linux Ray names the node by its network address and serves on every interface; with
    # this switch (meant for single-machine Ray on macOS/Windows) it uses 127.0.0.1. It is read
    # when ray is imported, and inherited by the processes ray.init starts.
    saved = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    if local:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        import logging

        import ray
        from ray._private import ray_constants
    except ImportError:
        raise FlatformerError("--ray needs Ray: pip install 'flatformer[ray]'") from None
    was = ray_constants.ENABLE_RAY_CLUSTER
    try:
        if local:
            ray_constants.ENABLE_RAY_CLUSTER = False  # in case ray was imported before
            ray.init(address="local", num_cpus=workers, include_dashboard=False,
                     logging_level=logging.WARNING)
        else:
            ray.init(address=address, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        hint = "" if local else (" (a cluster with token authentication needs "
                                 "RAY_AUTH_MODE=token and its token in ~/.ray/auth_token)")
        raise FlatformerError(f"cannot start or connect to Ray at {address}: "
                              f"{str(exc).splitlines()[0]}{hint}") from None
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = was
        if saved is None:
            os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = saved
    return ray


@contextlib.contextmanager
def _ray_session(address: str, workers: int):
    """Ray connected for the block: an existing ray.init is used as it is (and left open)."""
    # Not `import ray` first: connect_ray sets up the environment ray reads on import.
    owned = "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    ray = connect_ray(address, workers) if owned else sys.modules["ray"]
    try:
        yield
    finally:
        if owned:
            ray.shutdown()


def _run_ray(jobs: list[dict]):
    """(job, result) pairs as Ray tasks finish, on the connected Ray."""
    import ray
    # A worker that dies mid-job (killed, its node lost) is retried: the retry resumes from the
    # job's checkpoints, and the dead worker's run-folder locks went with it.
    task = ray.remote(num_cpus=1, max_retries=3)(run_job)
    pending = {task.remote(job): job for job in jobs}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            yield pending.pop(ref), ray.get(ref)


def check_sweep_fits(jobs: list[dict], out_dir: Path, workers: int, local: bool):
    """Refuse before anything runs a sweep whose jobs do not fit: each job in its share of this
    machine's memory (when the jobs run here), and all of them on the sweep folder's disk."""
    from .resources import available_memory, check_fits, estimate, free_disk, gb
    built = [_build(job)[0] for job in jobs]
    memory = available_memory()
    share = None if memory is None or not local else memory // max(1, min(workers, len(jobs)))
    for job, b in zip(jobs, built):
        try:
            check_fits(b, memory=share if local else 2**62, disk=2**62)
        except FlatformerError as exc:
            raise FlatformerError(f"job {job['name']}, one of {min(workers, len(jobs))} at a "
                                  f"time: {exc}") from None
    need, free = sum(estimate(b).disk for b in built), free_disk(out_dir)
    if need > free:
        raise FlatformerError(f"the sweep's {len(jobs)} unfinished jobs write about {gb(need)} "
                              f"but {gb(free)} is free under {out_dir}; raise checkpoint_every "
                              f"in the sweep file's [set] or run fewer seeds")


def run_sweep(path, out_dir, workers: int | None = None, ray: str | None = None,
              progress: Callable[[dict, dict, str], None] | None = None):
    """Run every unfinished job of the sweep file; write DIR/results.csv. Returns its rows and
    the failed jobs' one-line errors (a failed job has no rows; a rerun retries it).

    `progress(job, result, status)` is called once per job, status "skipped" (finished
    before), "trained" or "failed" (result {"error": ...}).
    """
    from .runs import atomic_write
    workers = (os.cpu_count() or 1) if workers is None else workers
    processes("--workers", workers)
    if ray and ray != "auto":
        _split_address(ray)
    jobs = expand(load_sweep(path), out_dir)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with hold(out_dir, "a sweep"):
        atomic_write(out_dir / "sweep.json", (json.dumps(jobs, indent=1) + "\n").encode())
        results = {job["name"]: done for job in jobs if (done := finished(job))}
        todo = [job for job in jobs if job["name"] not in results]
        check_sweep_fits(todo, out_dir, workers, local=ray is None or ray == "auto")
        failed = []
        # Connect first: a wrong address fails before anything is reported.
        with _ray_session(ray, workers) if ray and todo else contextlib.nullcontext():
            for job in jobs:
                if progress and job["name"] in results:
                    progress(job, results[job["name"]], "skipped")
            for job, result in _run_ray(todo) if ray else _run_local(todo, workers):
                if "error" in result:
                    failed.append(f"{job['name']}: {result['error']}")
                else:
                    results[job["name"]] = result
                if progress:
                    progress(job, result, "failed" if "error" in result else "trained")
        rows = [dict(job=job["name"], task=job["task"], preset=job["preset"],
                     recipe=job["recipe"], overrides=" ".join(_pairs(job["overrides"])), seed=r["seed"],
                     steps=r["step"], train_loss=r["train_loss"], val_loss=r["val_loss"],
                     rule_error=r["rule_error"], job_seconds=round(results[job["name"]]
                                                                   ["seconds"], 3))
                for job in jobs if job["name"] in results for r in results[job["name"]]["rows"]]
        atomic_write(out_dir / "results.csv", results_csv(rows).encode())
    return rows, failed


def results_csv(rows: list[dict]) -> str:
    """CSV text; floats in full (repr) precision, so equal results give equal files."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def read_results(path) -> list[dict]:
    """results.csv rows with numbers as numbers."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key in ("seed", "steps"):
            row[key] = int(row[key])
        for key in ("train_loss", "val_loss", "rule_error", "job_seconds"):
            row[key] = float(row[key])
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """One entry per configuration (job), in sweep order: seeds, seeds learned (rule error
    <= LEARNED), median and worst rule error, median held-out loss, and the job's seconds."""
    by_job: dict[str, list[dict]] = {}
    for row in rows:
        by_job.setdefault(row["job"], []).append(row)
    summary = []
    for name, group in by_job.items():
        errors = [r["rule_error"] for r in group]
        summary.append({"job": name, **{k: group[0][k] for k in ("task", "preset", "recipe",
                                                                  "overrides")},
                        "seeds": len(group),
                        "learned": sum(e <= LEARNED for e in errors),
                        "median_rule_error": statistics.median(errors),
                        "worst_rule_error": max(errors),
                        "median_val_loss": statistics.median(r["val_loss"] for r in group),
                        "seconds": group[0]["job_seconds"]})
    return summary
