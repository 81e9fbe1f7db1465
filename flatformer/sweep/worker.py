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
    from ..runs import checkpoint_path

    folder = Path(job["folder"])
    from ..limits import read_json

    if not os.path.lexists(folder / "done.json"):
        return None
    try:
        done = read_json(folder / "done.json", "done file", MAX_SWEEP_BYTES)
    except FlatformerError:
        return None  # unreadable: the job is trained again
    if not isinstance(done, dict):
        return None
    if done.get("job") != _identity(job):
        raise FlatformerError(
            f"{folder} holds a different job ({done.get('job')}); choose another --out or delete it"
        )
    first, last = job["seeds"]
    if all(
        checkpoint_path(folder / f"seed_{s}", job["steps"]).is_file()
        for s in range(first, last + 1)
    ):
        return done
    return None


def run_job(job: dict) -> dict:
    """Train one job (resuming whatever a killed sweep left) and mark it done. Runs in a worker
    process or a Ray task; returns done.json's contents, or {"error": ...} for a problem the
    user can fix, so one bad configuration does not stop the others."""
    from ..runs import atomic_write
    from ..train import train

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
    with ProcessPoolExecutor(
        workers,
        multiprocessing.get_context("spawn"),
        initializer=_watch_parent,
        initargs=(os.getpid(),),
    ) as pool:
        pending = {pool.submit(run_job, job): job for job in jobs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield pending.pop(future), future.result()
