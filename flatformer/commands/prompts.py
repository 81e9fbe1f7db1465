"""`flatformer prompts`: a task's own behaviour written as a JSON-lines prompts file."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..store.limits import whole
from ..store.write import output_file, write_file
from .app import app, console


@app.command()
def prompts(
    run: Path = typer.Argument(..., help="A run folder trained on one of flatformer's tasks."),
    out_path: Path = typer.Option(..., "--out", help="The JSON-lines file to write."),
    n: int = typer.Option(
        200, "-n", help="Examples: the held-out windows `circuits` measures, evenly spaced."
    ),
):
    """Write the task's held-out examples as {"prompt", "target", "corrupt", "corrupt_target"}
    lines, the file `circuits RUN --prompts FILE` reads for a model without a task; on the
    run it came from, it gives the same circuit as the task itself (docs/guide/prompts.md)."""
    from ..tasks.prompts import task_examples
    from ..store.runs import load_run

    whole("-n", n, 1, 1_000_000)
    out_path = output_file(out_path, "--out")
    loaded = load_run(run)
    rows = task_examples(loaded.task, loaded.data(), n)
    write_file(out_path, "".join(json.dumps(r) + "\n" for r in rows).encode(), "--out")
    console.print(f"wrote {len(rows)} examples to {out_path}")
