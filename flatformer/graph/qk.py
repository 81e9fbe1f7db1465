"""Attention explained, not only frozen: QK attributions (Kamath et al. 2025, "Tracing Attention
Computation"; circuit-tracer issue 53).

In the replacement model, head h of block L's query at position q is affine in the source nodes
(the transcoders' features and error nodes of earlier blocks, the token and position
embeddings): q = q_0 + sum_s q_s, with q_s the query the source alone makes and q_0 the one
every source off makes (b_Q, LayerNorm's offset, the biases of earlier blocks). The key at k
likewise. The pre-softmax score is therefore a sum of bilinear terms,

    score(q, k) = sum_{s, s'} q_s . k_s' / sqrt(dh) + sum_s' q_0 . k_s' / sqrt(dh)
                  + sum_s q_s . k_0 / sqrt(dh) + q_0 . k_0 / sqrt(dh),

a query-side node and a key-side node per term ("bias" for q_0, k_0), summing exactly to the
model's score. The query and key contributions come from the same batched pass as the graph's
edges (attribute(..., keep=hook_q, hook_k)).
"""

from __future__ import annotations

import numpy as np

from ..readout.points import qk_hooks

TOP = 10


def qk_terms(graph, layer: int, head: int, q: int, k: int) -> np.ndarray:
    """Every term of head `head` of block `layer`'s score at (query q, key k): a matrix
    (n_sources + 1, n_sources + 1), query-side node by key-side node, the last row and column
    the bias ("every source off") side. Its sum is the score."""
    cfg = graph.extras["replacement"].cfg
    q_name, k_name = qk_hooks(cfg, layer)
    kv = head // (cfg.n_heads // cfg.n_kv_heads)  # a grouped head reads its group's keys
    dq = graph.extras["contributions"][q_name][:, q, head]  # (n_s, dh)
    dk = graph.extras["contributions"][k_name][:, k, kv]
    q0 = graph.extras["baseline"][q_name][q, head]
    k0 = graph.extras["baseline"][k_name][k, kv]
    Q, K = np.vstack([dq, q0]), np.vstack([dk, k0])
    return Q @ K.T / np.sqrt(Q.shape[-1])


def cells(graph, pruned) -> list[tuple[int, int, int, int]]:
    """(layer, head, query, key) for every head a kept edge between two positions can pass
    through in one hop: the source at key k, the target at query q > k, the head's block after
    the source's and no later than the target's (a local layer's only when k is in q's
    window)."""
    rep = graph.extras["replacement"]
    n_s = rep.n_sources
    out = set()
    for t, s in zip(*np.nonzero(pruned.edge_mask)):
        k, ls = source_place(graph, s)
        q, lt = target_place(graph, t, n_s)
        if q <= k:
            continue
        for L in range(ls + 1, lt + 1):
            if rep.cfg.window(L) and q - k >= rep.cfg.window(L):  # a local layer's hidden key
                continue
            for h in range(rep.cfg.n_heads):
                out.add((int(L), h, int(q), int(k)))
    return sorted(out)


def source_place(graph, s: int) -> tuple[int, int]:
    """(position, block) where source node s writes; block -1 for the embeddings."""
    kind = graph.kind(s)
    if kind == "feature":
        L, p, _ = graph.features[s]
        return int(p), int(L)
    if kind == "error":
        i = s - graph.n_features
        return i % graph.n_pos, graph.error_layers[i // graph.n_pos]
    return (s - graph.n_features - graph.n_errors) % graph.n_pos, -1


def target_place(graph, t: int, n_s: int) -> tuple[int, int]:
    """(position, last block whose attention reaches it) of target node t."""
    if t >= n_s:  # a logit reads the last position after every block
        return graph.n_pos - 1, graph.n_layers - 1
    L, p, _ = graph.features[t]
    parallel = graph.extras["replacement"].cfg.parallel_attn_mlp  # its MLP reads before attention
    return int(p), int(L) - parallel


def qk_table(graph, pruned, ids: list[str], top: int = TOP) -> list[dict]:
    """For each cell a kept edge passes through: the score, the pattern, the `top` largest
    terms by size (query node id, key node id, value; "bias" for the all-off side) and the sum
    of the rest: the terms listed plus `rest` are the model's score (test_graph checks it)."""
    rep = graph.extras["replacement"]
    names = list(ids[: rep.n_sources]) + ["bias"]
    rows = []
    for L, h, q, k in cells(graph, pruned):
        terms = qk_terms(graph, L, h, q, k)
        flat = terms.ravel()
        order = np.argsort(-np.abs(flat), kind="stable")[:top]
        order = order[flat[order] != 0]
        listed = [
            {
                "query": names[i // terms.shape[1]],
                "key": names[i % terms.shape[1]],
                "value": float(flat[i]),
            }
            for i in order
        ]
        rows.append(
            {
                "layer": L,
                "head": h,
                "query_pos": q,
                "key_pos": k,
                "score": float(rep.cache[f"blocks.{L}.attn.hook_attn_scores"][0, h, q, k]),
                "pattern": float(rep.patterns[L][h, q, k]),
                "terms": listed,
                "rest": float(flat.sum() - flat[order].sum()),
            }
        )
    return rows
