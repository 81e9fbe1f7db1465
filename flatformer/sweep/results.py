"""results.csv: one row per seed, written in full precision, read back with numbers as
numbers, and summarised per configuration."""

from __future__ import annotations

import csv
import io
import statistics

from ..tasks.base import LEARNED

MAX_RESULTS_BYTES = 2**30  # millions of rows: more than any sweep writes

COLUMNS = [
    "job",
    "task",
    "preset",
    "recipe",
    "overrides",
    "seed",
    "steps",
    "train_loss",
    "val_loss",
    "rule_error",
    "job_seconds",
]


def results_csv(rows: list[dict]) -> str:
    """CSV text; floats in full (repr) precision, so equal results give equal files."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def read_results(path) -> list[dict]:
    """results.csv rows with numbers as numbers."""
    from ..store.read import text_stream

    rows = list(csv.DictReader(text_stream(path, "results", MAX_RESULTS_BYTES)))
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
        summary.append(
            {
                "job": name,
                **{k: group[0][k] for k in ("task", "preset", "recipe", "overrides")},
                "seeds": len(group),
                "learned": sum(e <= LEARNED for e in errors),
                "median_rule_error": statistics.median(errors),
                "worst_rule_error": max(errors),
                "median_val_loss": statistics.median(r["val_loss"] for r in group),
                "seconds": group[0]["job_seconds"],
            }
        )
    return summary
