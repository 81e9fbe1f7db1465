"""An attribution graph as the JSON circuit-tracer writes for Neuronpedia's graph viewer
(circuit-tracer's `frontend/graph_models.py` and `utils/create_graph_files.py`): `metadata`,
`qParams`, `nodes` and `links`, with its node ids:

- a feature: `{layer}_{index}_{pos}`, feature_type "cross layer transcoder" (the name
  circuit-tracer writes for per-layer transcoders too), jsNodeId `{layer}_{index}-0`;
- an error node: "mlp reconstruction error", feature -1, jsNodeId `{layer}_{pos}-0`; its
  node_id is `ERR_{layer}_{pos}`, not circuit-tracer's `0_{layer}_{pos}`, which is also the id
  of block 0's feature number `layer` at that position (node ids must be unique: links name
  them);
- a token: `E_{token id}_{pos}`, "embedding", layer "E", feature = pos;
- a logit: `{n_layers + 1}_{token id}_{last pos}`, "logit", with token_prob and
  is_target_logit (the most probable).

flatformer's models add position embeddings, which circuit-tracer's models (Gemma, Llama) do
not have: a position node is `P_{pos}_{pos}`, feature_type "embedding", layer "E", clerp
"position {pos}". Nodes kept are those pruning keeps that a kept link touches, and every token,
position and logit node, as circuit-tracer keeps them; `influence` is the node's cumulative
influence. `qParams.supernodes` holds the groups supernodes.py finds. flatformer's own additions sit in keys the viewer does not read: `qk` (the QK
attributions of attention, see qk.py) at the top level.
"""

from __future__ import annotations

import numpy as np


def node_records(graph, pruned, vocab) -> list[dict]:
    """One record per node of the graph (all of them, kept or not), in adjacency order."""
    T, L = graph.n_pos, graph.n_layers
    records = []

    def node(node_id, feature, layer, ctx, kind, js, **extra):
        records.append(
            {
                "node_id": node_id,
                "feature": int(feature),
                "layer": str(layer),
                "ctx_idx": int(ctx),
                "feature_type": kind,
                "token_prob": 0.0,
                "is_target_logit": False,
                "run_idx": 0,
                "reverse_ctx_idx": 0,
                "jsNodeId": js,
                "clerp": "",
                "influence": float(pruned.cumulative[len(records)]),
                "activation": None,
                **extra,
            }
        )

    for (layer, pos, idx), act in zip(graph.features, graph.activations):
        node(
            f"{layer}_{idx}_{pos}",
            idx,
            layer,
            pos,
            "cross layer transcoder",
            f"{layer}_{idx}-0",
            activation=float(act),
        )
    for layer in graph.error_layers:
        for pos in range(T):
            node(
                f"ERR_{layer}_{pos}", -1, layer, pos, "mlp reconstruction error", f"{layer}_{pos}-0"
            )
    for pos, tok in enumerate(graph.tokens):
        node(f"E_{tok}_{pos}", pos, "E", pos, "embedding", f"E_{tok}-{pos}", clerp=vocab[tok])
    for pos in range(T):
        node(
            f"P_{pos}_{pos}", pos, "E", pos, "embedding", f"P_{pos}-{pos}", clerp=f"position {pos}"
        )
    for r, (tok, p) in enumerate(zip(graph.logit_tokens, graph.logit_probs)):
        node(
            f"{L + 1}_{tok}_{T - 1}",
            tok,
            L + 1,
            T - 1,
            "logit",
            f"L_{tok}-{T - 1}",
            token_prob=float(p),
            is_target_logit=r == 0,
            clerp=f'Output "{vocab[tok]}" (p={float(p):.3f})',
        )
    return records


def graph_json(
    graph,
    pruned,
    vocab,
    slug: str,
    prompt: str,
    scan: str = "",
    transcoder_list=(),
    node_threshold: float = 0.8,
    extra: dict | None = None,
    supernodes=(),
) -> dict:
    """The graph file's contents (see the module's docstring). `supernodes`: [label, node id,
    ...] lists for `qParams`, each kept with the members the file holds, if two or more."""
    records = node_records(graph, pruned, vocab)
    kept = {i for i in np.flatnonzero(pruned.node_mask)}
    dst, src = np.nonzero(pruned.edge_mask)
    links = [
        {
            "source": records[s]["node_id"],
            "target": records[t]["node_id"],
            "weight": float(graph.adjacency[t, s]),
        }
        for t, s in zip(dst, src)
        if s in kept and t in kept
    ]
    touched = {link["source"] for link in links} | {link["target"] for link in links}
    nodes = [
        records[i]
        for i in sorted(kept)
        if records[i]["node_id"] in touched or records[i]["feature_type"] in ("embedding", "logit")
    ]
    present = {n["node_id"] for n in nodes}
    groups = [[g[0], *[i for i in g[1:] if i in present]] for g in supernodes]
    out = {
        "metadata": {
            "slug": slug,
            "scan": scan,
            "transcoder_list": list(transcoder_list),
            "prompt_tokens": [vocab[t] for t in graph.tokens],
            "prompt": prompt,
            "node_threshold": node_threshold,
        },
        "qParams": {
            "pinnedIds": [],
            "supernodes": [g for g in groups if len(g) > 2],
            "linkType": "both",
            "clickedId": "",
            "sg_pos": "",
        },
        "nodes": nodes,
        "links": links,
    }
    out.update(extra or {})
    return out
