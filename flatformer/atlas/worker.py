"""One atlas job in a worker process or Ray task: train it (the sweep's `run_job`: skipped when
finished, resumed when a kill left it half done), measure each seed's last checkpoint, write
its explorer page, and mark the job measured (DIR/<job>/measures.json, written last and
atomically). A rerun skips measured jobs, so a killed atlas redoes only the jobs in flight."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from ..errors import FlatformerError
from ..sweep.plan import MAX_SWEEP_BYTES, _identity
from ..sweep.worker import finished, run_job
from .measure import MEASURES

MEASURED = "measures.json"
EXPLORER = "explorer.html"
PAGE_MAX_PARAMS = 1_000_000  # as `flatformer explore`: what the page recomputes in a browser


def measured(job: dict) -> dict | None:
    """The job's measures.json with its training result, when the job is trained and measured
    (and, when asked for, its explorer pages written); else None."""
    from ..store.layout import seed_folder
    from ..store.read import read_json

    done = finished(job)
    path = Path(job["folder"]) / MEASURED
    if done is None or not os.path.lexists(path):
        return None
    try:
        record = read_json(path, "measures file", MAX_SWEEP_BYTES)
    except FlatformerError:
        return None  # unreadable: measured again
    first, last = job["seeds"]
    if (
        not isinstance(record, dict)
        or record.get("job") != _identity(job)
        or not isinstance(record.get("rows"), list)
        or [r.get("seed") if isinstance(r, dict) else None for r in record["rows"]]
        != list(range(first, last + 1))
        or not all(set(r) <= {"seed", *MEASURES} for r in record["rows"])
    ):
        return None
    if job.get("explore") and not all(
        (seed_folder(job["folder"], s) / EXPLORER).is_file() or record.get("no_page")
        for s in range(first, last + 1)
    ):
        return None
    cpu = record.get("cpu_seconds")
    return {**done, "measures": record["rows"], "cpu_seconds": cpu if _number(cpu) else None}


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _clean(value):
    """A measure as JSON holds it: non-finite floats become None (an empty cell)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def measure_job(job: dict) -> dict:
    """Train (or skip, or resume) one atlas job, measure its seeds, write their explorer pages
    when `job["explore"]` asks for them, and mark it measured. Returns the sweep's result with
    "measures" (one row per seed) and "cpu_seconds" (this process's CPU time for the job:
    training, measuring and pages; what a core spends on it, whatever else the machine runs),
    or {"error": ...}."""
    from ..store.runs import load_run
    from ..store.layout import seed_folder
    from ..store.write import atomic_write
    from .measure import run_measures

    done = measured(job)
    if done is not None:
        return done
    started = time.process_time()  # this process's CPU: the job's cost on its core
    result = run_job(job)
    if "error" in result:
        return result
    rows, no_page = [], False
    try:
        first, last = job["seeds"]
        for seed in range(first, last + 1):
            run = load_run(seed_folder(job["folder"], seed))
            rows.append({"seed": seed, **{k: _clean(v) for k, v in run_measures(run).items()}})
            if job.get("explore"):
                if run.cfg.n_params > PAGE_MAX_PARAMS:
                    no_page = True
                else:
                    _write_page(run, job["explore"])
    except FlatformerError as exc:
        return {"error": str(exc)}
    cpu = time.process_time() - started
    record = {
        "job": _identity(job),
        "rows": rows,
        "cpu_seconds": cpu,
        **({"no_page": True} if no_page else {}),
    }
    atomic_write(Path(job["folder"]) / MEASURED, (json.dumps(record) + "\n").encode())
    return {**result, "measures": rows, "cpu_seconds": cpu}


def _write_page(run, checkpoints: int):
    """The run's explorer page (`flatformer explore`'s) with `checkpoints` checkpoints."""
    from ..explorer.export import export_run
    from ..explorer.page import page_html
    from ..store.write import atomic_write

    page = page_html(export_run(run, None, checkpoints)).encode("utf-8")
    atomic_write(Path(run.path) / EXPLORER, page)
