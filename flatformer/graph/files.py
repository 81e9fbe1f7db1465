"""`flatformer graph`'s work, without the printing: the prompts read and checked, the graphs
computed, pruned and written, one JSON file per prompt (named by its slug) and
`graph-metadata.json` listing them, as circuit-tracer's create_graph_files writes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import FlatformerError
from ..store.limits import strict_json
from ..store.write import atomic_write, make_folder
from .attribution import attribute
from .export import graph_json, node_records
from .examples import top_examples
from .paths import frozen_factors
from .prune import prune
from .qk import qk_table
from .supernodes import decoder_groups, supernode_params

METADATA = "graph-metadata.json"


def prompt_tokens(run, text: str) -> np.ndarray:
    """The token ids of `text` as the run's task reads it, with one-line errors."""
    ids = run.task.encode(text)
    if not 1 <= len(ids) <= run.cfg.n_ctx:
        raise FlatformerError(
            f"the prompt has {len(ids)} tokens; the model reads 1..{run.cfg.n_ctx}"
        )
    return np.asarray(ids, dtype=np.int64)


def file_prompts(run, path) -> list[tuple[str, np.ndarray]]:
    """(text, tokens) of every prompt of a prompts file: one prompt a line, or JSON-lines
    examples (flatformer/tasks/prompts.py); the graph explains the prediction after each."""
    from ..tasks.prompts import is_examples_file, read_examples, read_lines

    if is_examples_file(path):
        tokens, index, *_ = read_examples(path, run.task, run.cfg.n_ctx, run.vocab_out)
        rows = [tokens[i, : index[i] + 1] for i in range(len(tokens))]
    else:
        rows = read_lines(path, run.task, run.cfg.n_ctx)[0]
    return [(run.task.decode(r), r) for r in rows]


def graph_files(
    run,
    prompts: list[tuple[str, np.ndarray]],
    transcoders,
    step: int | None = None,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    max_n_logits: int = 10,
    desired_logit_prob: float = 0.95,
    slug: str = "graph",
    scan: str = "",
    progress=None,
) -> list[dict]:
    """One graph file's contents per prompt, slugs `slug` (one prompt) or `slug-i`, with the
    kept features' top activations on the run's held-out windows (`examples`)."""
    model = run.model(step)
    docs = []
    for i, (text, tokens) in enumerate(prompts):
        graph = attribute(
            model, transcoders, tokens, max_n_logits, desired_logit_prob, keep=qk_hooks(model.cfg)
        )
        pruned = prune(graph, node_threshold, edge_threshold)
        name = slug if len(prompts) == 1 else f"{slug}-{i}"
        doc = graph_document(
            graph, pruned, run.vocab, transcoders, name, text, scan or run.path.name, node_threshold
        )
        features = {
            (n["layer"], n["feature"])
            for n in doc["nodes"]
            if n["feature"] >= 0 and n["feature_type"] == "cross layer transcoder"
        }
        doc["examples"] = top_examples(run, model, transcoders, features)
        docs.append(doc)
        if progress:
            progress(i + 1, len(prompts), name)
    return docs


def graph_document(
    graph, pruned, vocab, transcoders, slug: str, prompt: str, scan: str, node_threshold: float
) -> dict:
    """One graph file's contents: graph_json's, with the QK attributions (`qk`), the supernodes
    and every link's factors (`frozen`)."""
    ids = [r["node_id"] for r in node_records(graph, pruned, vocab)]
    doc = graph_json(
        graph,
        pruned,
        vocab,
        slug,
        prompt,
        scan,
        [f"blocks.{tc.layer}" for tc in transcoders],
        node_threshold,
        extra={"qk": qk_table(graph, pruned, ids)},
        supernodes=supernode_params(
            graph, decoder_groups(graph, pruned.node_mask, transcoders), ids
        ),
    )
    index = {node_id: j for j, node_id in enumerate(ids)}
    doc["frozen"] = frozen_factors(graph, ids, [index[n["node_id"]] for n in doc["nodes"]])
    return doc


def qk_hooks(cfg) -> tuple[str, ...]:
    """The queries and keys attention multiplies, every block's (the rotated ones with rotary
    positions)."""
    from ..readout.points import qk_hooks as of_block

    return tuple(name for L in range(cfg.n_layers) for name in of_block(cfg, L))


def write_graph_files(docs: list[dict], out) -> list[Path]:
    """Each document as `out/{slug}.json`, and `out/graph-metadata.json` listing them all
    (those already listed there under other slugs kept, as circuit-tracer's
    add_graph_metadata keeps them)."""
    from ..store.read import read_json

    out = make_folder(out, "--out")
    listed = []
    if (out / METADATA).is_file():
        old = read_json(out / METADATA, "graph metadata", 10_000_000)
        if isinstance(old, dict) and isinstance(old.get("graphs"), list):
            listed = [g for g in old["graphs"] if isinstance(g, dict)]
    slugs = {d["metadata"]["slug"] for d in docs}
    listed = [g for g in listed if g.get("slug") not in slugs] + [d["metadata"] for d in docs]
    paths = []
    for doc in docs:
        path = out / f"{doc['metadata']['slug']}.json"
        atomic_write(path, (strict_json(doc, indent=1) + "\n").encode())
        paths.append(path)
    atomic_write(out / METADATA, (strict_json({"graphs": listed}, indent=1) + "\n").encode())
    return paths
