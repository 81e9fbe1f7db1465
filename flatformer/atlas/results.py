"""The atlas's results.csv: the sweep's columns, the job's CPU seconds (training, measuring
and pages, in the process that ran it), the draw, each run's configuration (one
column per knob, named as its --set key) and its measures (named as Zhong et al.'s published
table names them, ours beside them)."""

from __future__ import annotations

import csv
import io

from ..sweep.results import COLUMNS as SWEEP_COLUMNS
from .measure import MEASURES

CONFIG = (
    "p",
    "train_fraction",
    "attn_coeff",
    "d_model",
    "n_heads",
    "d_head",
    "n_layers",
    "d_mlp",
    "act_fn",
    "lr",
    "weight_decay",
    "data_seed",
)
COLUMNS = [*SWEEP_COLUMNS, "job_cpu_seconds", "draw", *CONFIG, *MEASURES]
TEXT = {"job", "task", "preset", "recipe", "overrides", "act_fn", "mechanism", "key_frequencies"}
MAX_RESULTS_BYTES = 2**30


def config_columns(job) -> dict:
    """A built `jobs.Job`'s knobs: the task's settings (p, train_fraction; empty where the task
    has none), the model's fields and the recipe's. A model without the attention knob is at
    1, learned attention."""
    return {
        "p": getattr(job.task, "p", ""),
        "train_fraction": getattr(job.task, "train_fraction", ""),
        "attn_coeff": getattr(job.cfg, "attn_coeff", 1.0),
        **{k: getattr(job.cfg, k) for k in ("d_model", "n_heads", "d_head", "n_layers", "d_mlp")},
        "act_fn": job.cfg.act_fn,
        "lr": job.recipe.lr,
        "weight_decay": job.recipe.weight_decay,
        "data_seed": job.data_seed,
    }


def results_csv(rows: list[dict]) -> str:
    """CSV text, floats in full (repr) precision so equal results give equal files; a measure
    a run lacks is an empty cell."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COLUMNS, lineterminator="\n", restval="")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buffer.getvalue()


def _number(text: str):
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text and "e" not in text else value


def read_atlas(path) -> list[dict]:
    """results.csv rows, numbers as numbers and empty cells as None."""
    from ..store.read import text_stream

    rows = list(csv.DictReader(text_stream(path, "atlas results", MAX_RESULTS_BYTES)))
    return [{k: (v if k in TEXT else _number(v)) for k, v in row.items()} for row in rows]
