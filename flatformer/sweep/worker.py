"""One job in a worker: skip it when finished, else train it (resuming what a killed sweep
left) and mark it done; and the local process pool that runs jobs a few at a time."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from ..errors import FlatformerError
from .plan import MAX_SWEEP_BYTES, _build, _identity


def finished(job: dict) -> dict | None:
    """The job's done.json when the job is finished, else None. A done.json for a different
    job in the same folder is an error: the folder holds another sweep's runs."""
    from ..store.layout import DONE, checkpoint_path, seed_folder
    from ..store.read import read_json

    folder = Path(job["folder"])
    if not os.path.lexists(folder / DONE):
        return None
    try:
        done = read_json(folder / DONE, "done file", MAX_SWEEP_BYTES)
    except FlatformerError:
        return None  # unreadable: the job is trained again
    if not isinstance(done, dict):
        return None
    if done.get("job") != _identity(job):
        raise FlatformerError(
            f"{folder} holds a different job ({done.get('job')}); choose another --out or delete it"
        )
    first, last = job["seeds"]
    if sane_done(done, range(first, last + 1)) and all(
        checkpoint_path(seed_folder(folder, s), job["steps"]).is_file()
        for s in range(first, last + 1)
    ):
        return done
    return None


def sane_done(done: dict, seeds: range) -> bool:
    """done.json's seconds and one row per seed with its numbers (a file edited or spoiled
    otherwise only means the job is trained again)."""
    rows = done.get("rows")

    def number(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    return (
        number(done.get("seconds"))
        and isinstance(rows, list)
        and all(isinstance(r, dict) for r in rows)
        and [r.get("seed") for r in rows] == list(seeds)
        and all(type(r.get("step")) is int for r in rows)
        and all(number(r.get(k)) for r in rows for k in ("train_loss", "val_loss", "rule_error"))
    )


def run_job(job: dict) -> dict:
    """Train one job (resuming whatever a killed sweep left) and mark it done. Runs in a worker
    process or a Ray task; returns done.json's contents, or {"error": ...} for a problem the
    user can fix, so one bad configuration does not stop the others."""
    from ..store.layout import DONE
    from ..store.write import atomic_write
    from ..training.trainer import train

    try:
        if not (Path(job["sweep_dir"]) / "sweep.json").is_file():
            raise FlatformerError(
                f"{job['sweep_dir']} is not visible on this node; put the "
                f"sweep's --out on a filesystem every node shares"
            )
        done = finished(job)
        if done is not None:
            return done
        started = time.perf_counter()
        built, _ = _build(job)
        trainer = train(built, resume=True)  # resume=True also starts a fresh folder afresh
        seconds = time.perf_counter() - started
    except FlatformerError as exc:
        return {"error": str(exc)}
    rows = [
        {"seed": seed, **{k: m[-1][k] for k in ("step", "train_loss", "val_loss", "rule_error")}}
        for seed, m in zip(built.seeds, trainer.metrics)
    ]
    done = {"job": _identity(job), "seconds": seconds, "rows": rows}
    atomic_write(Path(job["folder"]) / DONE, (json.dumps(done) + "\n").encode())
    return done


def _watch_parent(parent: int):
    """Pool initializer: exit when the driver dies, even by SIGKILL, so an orphaned worker
    never keeps writing into folders a rerun is about to resume."""

    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _run_local(jobs: list[dict], workers: int, work=run_job):
    """(job, result) pairs as jobs finish, `workers` processes at a time; `work` (run_job,
    or a function of the same contract) runs each job."""
    if workers == 1:
        for job in jobs:
            yield job, work(job)
        return
    # One BLAS thread per worker, as Ray gives its tasks: a worker is one core's share, and on a
    # busy machine BLAS threads spinning for a core multiplied a step's CPU time. Read by NumPy
    # when a spawned worker imports it, so set for the pool's life (the driver's NumPy, loaded
    # already, keeps its own).
    saved = {name: os.environ.get(name) for name in SINGLE_THREADED}
    os.environ.update(dict.fromkeys(SINGLE_THREADED, "1"))
    try:
        yield from _pool(jobs, workers, work)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _pool(jobs: list[dict], workers: int, work):
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # spawn, not fork: the driver has a progress thread, and fork copies its locks mid-use.
    with ProcessPoolExecutor(
        workers,
        multiprocessing.get_context("spawn"),
        initializer=_watch_parent,
        initargs=(os.getpid(),),
    ) as pool:
        pending = {pool.submit(work, job): job for job in jobs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield pending.pop(future), future.result()
