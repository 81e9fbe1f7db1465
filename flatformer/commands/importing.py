"""`flatformer import SOURCE --out RUN`: another framework's checkpoint as a flatformer run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

from .app import app, out


@app.command("import")
def import_model(
    source: Path = typer.Argument(
        ...,
        help="A nanoGPT ckpt.pt, a Hugging Face GPT-2 folder, a TransformerLens state dict, or "
        "an InterpBench case folder (ll_model.pth, ll_model_cfg.pkl, edges.pkl).",
    ),
    out_dir: Path = typer.Option(..., "--out", help="The run folder to write."),
    fmt: Optional[str] = typer.Option(
        None,
        "--format",
        help="nanogpt, hf (a Hugging Face folder), transformer-lens or interpbench (default: detected).",
    ),
    vocab: Optional[Path] = typer.Option(
        None,
        "--vocab",
        help="nanoGPT's meta.pkl: a character vocabulary, for any format (a TransformerLens "
        "state dict's too); a GPT-2 folder's own tokenizer is read without it.",
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", help="A TransformerLens state dict's cfg.json (HookedTransformerConfig)."
    ),
    corpus: Optional[Path] = typer.Option(
        None,
        "--corpus",
        help="A held-out text, read as prompts are (text, for a model with a tokenizer or "
        "characters), kept in the run: what eval, analyze, figures and circuits measure on "
        "(its last 100,000 tokens).",
    ),
):
    """Import a model from another framework, checked and with its provenance, as a run."""
    from ..importers.run import read_source, write_run
    from ..store.run import claim_import

    claim_import(out_dir)  # refused before the source is read, not after
    imported, task = read_source(source, fmt, vocab, config, corpus)
    write_run(imported, task, out_dir)
    cfg = imported.cfg
    out.print(
        Text(
            f"{out_dir}: {imported.provenance['format']} model, {cfg.n_params:,} "
            f"parameters, {cfg.n_layers} layer{'s' * (cfg.n_layers > 1)}, d_model {cfg.d_model}, "
            f"vocabulary {cfg.d_vocab} ({task.label})"
        ),
        soft_wrap=True,
    )
    if cfg.newer_features():
        out.print(Text(f"  architecture: {', '.join(cfg.newer_features())}"), soft_wrap=True)
    if task.tokens is not None:
        out.print(Text(f"  held-out text: {len(task.tokens):,} tokens from {corpus}"))
    for change in imported.provenance["changes"]:
        out.print(Text(f"  {change}"), soft_wrap=True)
    if "circuit" in imported.provenance:
        circuit = imported.provenance["circuit"]
        out.print(Text(f"  known circuit: {len(circuit['edges'])} edges ({circuit['source']})"))
    if not cfg.causal:
        out.print(Text("  attention reads every position (not causal)"))
