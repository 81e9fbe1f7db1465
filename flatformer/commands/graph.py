"""`flatformer graph`: the attribution graph of a prompt, written as circuit-tracer writes it
for Neuronpedia's viewer."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from ..errors import FlatformerError
from .app import ProgressDisplay, app, out


@app.command()
def graph(
    run: Path = typer.Argument(..., help="A run folder."),
    prompt: str | None = typer.Option(None, help="The prompt (the task's text)."),
    prompts: Path | None = typer.Option(
        None, help="A prompts file, one prompt a line or JSON-lines examples: one graph each."
    ),
    out_dir: Path = typer.Option(
        ..., "--out", help="Folder for the graph JSON files and their pages (SLUG.html)."
    ),
    transcoders: Path | None = typer.Option(
        None, help="A folder of SAELens transcoders, one per MLP [trained now, saved in --out]."
    ),
    step: int | None = typer.Option(None, help="The run's checkpoint [last]."),
    node_threshold: float = typer.Option(0.8, help="Cumulative influence of the nodes kept."),
    edge_threshold: float = typer.Option(0.98, help="Cumulative influence of the edges kept."),
    max_logits: int = typer.Option(10, help="Most output logits explained."),
    logit_prob: float = typer.Option(0.95, help="Their cumulative probability."),
    slug: str = typer.Option("graph", help="The graph's name (its file, slug-i for many)."),
):
    """The attribution graph of each prompt (Ameisen et al. 2025): transcoder features, error
    nodes, tokens and positions, and the top logits, joined by direct effects through the
    model with attention and LayerNorm frozen, pruned by influence; with the QK attribution of
    every attention score a kept edge passes through."""
    from ..explorer.graph_page import write_graph_pages
    from ..graph.files import file_prompts, graph_files, prompt_tokens, write_graph_files
    from ..graph.transcoders import (
        L1,
        STEPS,
        WIDTH,
        load_transcoders,
        mlp_layers,
        save_transcoders,
        train_transcoders,
    )
    from ..store.runs import load_run
    from ..store.write import claim_folder

    if (prompt is None) == (prompts is None):
        raise FlatformerError("give --prompt TEXT or --prompts FILE (one of them)")
    for name, value in (
        ("--node-threshold", node_threshold),
        ("--edge-threshold", edge_threshold),
        ("--logit-prob", logit_prob),
    ):
        if not 0.0 <= value <= 1.0:
            raise FlatformerError(f"{name} must be between 0 and 1, got {value}")
    if max_logits < 1:
        raise FlatformerError(f"--max-logits must be at least 1, got {max_logits}")
    if not slug or not all(c.isalnum() or c in "-_." for c in slug) or slug.startswith("."):
        raise FlatformerError(f"--slug must be letters, digits, '-', '_' or '.', got {slug!r}")
    the_run = load_run(run)
    the_run.resolve_step(step)
    rows = file_prompts(the_run, prompts) if prompts else [(prompt, prompt_tokens(the_run, prompt))]
    claim_folder(out_dir, "--out", ours=lambda f: (Path(f) / "graph-metadata.json").is_file())
    model = the_run.model(step)
    with ProgressDisplay({"transcoders": "transcoders", "graphs": "graphs"}) as progress:
        if transcoders is not None:
            found = load_transcoders(transcoders, model)
        elif mlp_layers(model.cfg):
            out.print(
                Text(
                    f"{run} has no transcoders given: training one per MLP (ReLU, width {WIDTH}, "
                    f"L1 {L1}, {STEPS} steps), saved in {out_dir / 'transcoders'}"
                )
            )
            found, metrics = train_transcoders(
                the_run, step, progress=lambda i, n, m: progress("transcoders", i, n, m)
            )
            save_transcoders(found, out_dir / "transcoders", the_run.path.name)
            for m in metrics:
                out.print(
                    Text(
                        f"  block {m['layer']}: L0 {m['l0']:.2f}, FVU {m['fvu']:.4f}, "
                        f"dead {m['dead']} of {m['d_sae']}"
                    )
                )
        else:
            found = []
        docs = graph_files(
            the_run,
            rows,
            found,
            step,
            node_threshold,
            edge_threshold,
            max_logits,
            logit_prob,
            slug,
            progress=lambda i, n, m: progress("graphs", i, n, m),
        )
    paths = write_graph_files(docs, out_dir)
    pages = write_graph_pages(docs, out_dir)
    for doc, path, page in zip(docs, paths, pages):
        n_feat = sum(n["feature_type"] == "cross layer transcoder" for n in doc["nodes"])
        n_err = sum(n["feature_type"] == "mlp reconstruction error" for n in doc["nodes"])
        top = next(n for n in doc["nodes"] if n["is_target_logit"])
        out.print(
            Text(
                f"{doc['metadata']['prompt']!r}: {n_feat} features, {n_err} error nodes, "
                f"{len(doc['links'])} links kept, {len(doc['qParams']['supernodes'])} supernodes; "
                f"top output {top['clerp']}; wrote {path} and its page {page.name}"
            )
        )
