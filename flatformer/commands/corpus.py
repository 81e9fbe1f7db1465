"""`flatformer corpus FILE`: what a text file becomes as a task, before training on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer
from rich.table import Table
from rich.text import Text

from .app import app, out


@app.command()
def corpus(
    file: Path = typer.Argument(..., help="A UTF-8 text file."),
    tokenizer: str = typer.Option("word", help="word (split at whitespace) or char."),
):
    """Check a text file as a training corpus: its tokens, vocabulary and the presets it fits."""
    from ..config import PRESETS, preset
    from ..errors import FlatformerError
    from ..tasks.corpus import TOKENS_PER_DIM, CorpusTask

    task = CorpusTask.from_file(file, tokenizer)
    n = len(task.tokens)
    # Token strings are the user's text: Text() keeps rich from reading "[b]" as markup.
    out.print(
        Text(
            f"{file.name}: {n:,} {tokenizer} tokens ({n - task.n_held_out:,} train, "
            f"the last {task.n_held_out:,} held out), {len(task.vocab):,} distinct"
        )
    )
    counts = np.bincount(task.tokens, minlength=len(task.vocab))
    top = np.argsort(-counts, kind="stable")[:10]
    out.print(Text("most common: " + ", ".join(f"{task.vocab[i]} ({counts[i]:,})" for i in top)))
    table = Table("preset", "d_model", "vocabulary limit", "parameters", "fits")
    for name in PRESETS:
        cfg = preset(name, len(task.vocab))
        try:
            task.check_config(cfg)
            fits = "yes"
        except FlatformerError:
            fits = "no"
        table.add_row(
            name, str(cfg.d_model), str(TOKENS_PER_DIM * cfg.d_model), f"{cfg.n_params:,}", fits
        )
    out.print(table)
