"""Pruning an attribution graph by influence (Ameisen et al. 2025, "Circuit Tracing", Appendix
"Graph pruning"; circuit-tracer's prune_graph).

The adjacency's absolute values, each row divided by its sum, give A (a node's share of its
input from each source). The influence of every node on the logits is w (A + A^2 + ...) =
w ((I - A)^-1 - I), w the logits' probabilities; nodes are kept, most influential first, up to
`node_threshold` of the total influence (tokens, positions and logits always). Edges are then
scored on the graph of kept nodes, each by its share A_ts times its target's influence (plus the
target's own weight), and kept up to `edge_threshold` of the total score. Last, feature and
error nodes without an outgoing kept edge, and features without an incoming one, are dropped,
until nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FlatformerError


def normalise(matrix: np.ndarray) -> np.ndarray:
    """|matrix| with each row divided by its sum (rows of zeros stay zero)."""
    a = np.abs(matrix)
    return a / np.maximum(a.sum(1, keepdims=True), 1e-10)


def influence(A: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """weights (A + A^2 + ...): each node's total influence on the weighted targets. The graph
    is acyclic, so A is nilpotent and the sum has at most n terms."""
    current = weights @ A
    total = current.copy()
    for _ in range(len(A)):
        if not current.any():
            return total
        current = current @ A
        total += current
    raise FlatformerError("the graph has a cycle: influence does not converge")


def threshold_of(scores: np.ndarray, fraction: float) -> float:
    """The score at which the largest scores first reach `fraction` of their total."""
    ordered = np.sort(scores.ravel())[::-1]
    total = ordered.sum()
    if total <= 0:
        return float(ordered[0]) if len(ordered) else 0.0
    index = int(np.searchsorted(np.cumsum(ordered) / total, fraction))
    return float(ordered[min(index, len(ordered) - 1)])


@dataclass
class Pruned:
    """Which nodes and edges (target, source) are kept, and each node's cumulative influence
    (the share of total influence held by the nodes at least as influential as it)."""

    node_mask: np.ndarray
    edge_mask: np.ndarray
    cumulative: np.ndarray
    influence: np.ndarray


def prune(graph, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> Pruned:
    for name, value in (("node threshold", node_threshold), ("edge threshold", edge_threshold)):
        if not 0.0 <= value <= 1.0:
            raise FlatformerError(f"the {name} must be between 0 and 1, got {value}")
    n = len(graph.adjacency)
    n_kept_always = graph.n_inputs + graph.n_logits
    n_f = graph.n_features
    weights = np.zeros(n)
    weights[n - graph.n_logits :] = graph.logit_probs
    node_influence = influence(normalise(graph.adjacency), weights)
    nodes = node_influence >= threshold_of(node_influence, node_threshold)
    nodes[n - n_kept_always :] = True
    pruned = graph.adjacency.copy()
    pruned[~nodes] = 0
    pruned[:, ~nodes] = 0
    A = normalise(pruned)
    edge_scores = A * (influence(A, weights) + weights)[:, None]
    edges = edge_scores >= threshold_of(edge_scores, edge_threshold)
    edges &= pruned != 0
    inner = slice(0, n - n_kept_always)  # features and errors
    while True:
        before = nodes.copy()
        edges[~nodes] = False
        edges[:, ~nodes] = False
        nodes[inner] &= edges[:, inner].any(0)  # something downstream reads it
        nodes[:n_f] &= edges[:n_f].any(1)  # something upstream feeds it
        if (nodes == before).all():
            break
    order = np.argsort(-node_influence, kind="stable")
    cumulative = np.zeros(n)
    total = node_influence.sum()
    cumulative[order] = np.cumsum(node_influence[order]) / (total if total > 0 else 1.0)
    return Pruned(nodes, edges, cumulative, node_influence)
