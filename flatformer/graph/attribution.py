"""The attribution graph of one prompt (Ameisen et al. 2025, "Circuit Tracing", Section 2.3):
nodes for the active transcoder features, the error nodes, the input tokens and positions, and
the top output logits; an edge s -> t is s's direct effect on t's input through the replacement
model's frozen linear paths (residual stream and frozen attention), everything else held.

The replacement model is affine in its source nodes, so the edge s -> t is exactly t's input
with only s switched on minus t's input with every source off; the latter is t's bias term
(the transcoders' b_enc and b_dec, attention's and the unembedding's biases, LayerNorm's
offsets, as they reach t). One batched pass of the replacement model computes all of them:
sequence 0 has every source off, sequence 1 + s has source s alone on.

Node order and adjacency as circuit-tracer's `Graph`: rows are targets, columns sources, nodes
[features, errors, tokens, positions, logits].
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..engine.components import softmax
from .replacement import Replacement
from .transcoders import Transcoder


@dataclass
class Graph:
    """An attribution graph. `features` (n_f, 3) holds (layer, position, index) per active
    feature, `activations` (n_f,) their values; `logit_tokens` and `logit_probs` the output
    logits the graph explains (most probable first); `adjacency` (n, n) the direct effects,
    target by source; `bias` (n,) each target's input with every source off, and `inputs` (n,)
    each node's input in the model (a feature's pre-activation, a logit minus the mean logit;
    0 for source-only nodes): inputs = adjacency.sum(1) + bias for every target (with every
    head's paths; a graph of some heads only keeps the model's inputs)."""

    tokens: np.ndarray
    features: np.ndarray
    activations: np.ndarray
    error_layers: list[int]
    logit_tokens: np.ndarray
    logit_probs: np.ndarray
    adjacency: np.ndarray
    bias: np.ndarray
    inputs: np.ndarray
    n_layers: int
    extras: dict = field(default_factory=dict)

    @property
    def n_pos(self) -> int:
        return len(self.tokens)

    @property
    def n_features(self) -> int:
        return len(self.features)

    @property
    def n_errors(self) -> int:
        return len(self.error_layers) * self.n_pos

    @property
    def n_logits(self) -> int:
        return len(self.logit_tokens)

    @property
    def n_inputs(self) -> int:
        """Token and position nodes: the graph's inputs, always kept by pruning."""
        return 2 * self.n_pos

    def kind(self, node: int) -> str:
        """ "feature", "error", "token", "position" or "logit"."""
        bounds = np.cumsum([self.n_features, self.n_errors, self.n_pos, self.n_pos])
        return ("feature", "error", "token", "position", "logit")[
            int(np.searchsorted(bounds, node, side="right"))
        ]


def salient_logits(logits: np.ndarray, max_n_logits: int = 10, desired_prob: float = 0.95):
    """The fewest most probable tokens whose probabilities sum to `desired_prob`, at most
    `max_n_logits` (circuit-tracer's compute_salient_logits): (ids, probabilities)."""
    probs = softmax(logits)
    order = np.argsort(-probs, kind="stable")[:max_n_logits]
    cut = int(np.searchsorted(np.cumsum(probs[order]), desired_prob)) + 1
    order = order[:cut]
    return order, probs[order]


def graph_memory(n_sources: int, n_features: int, n_logits: int) -> int:
    """Bytes of the graph's float64 matrices: every source's effect on every target, and the
    (n, n) adjacency with the copies pruning makes of it (normalised, absolute, pruned)."""
    n = n_sources + n_logits
    return 8 * ((n_sources + 1) * (n_features + n_logits) + 5 * n * n)


def check_graph_memory(n_sources: int, n_features: int, n_logits: int, n_tokens: int):
    """Refuse in one line, before the matrices are made, a graph larger than the machine's
    memory; the sources grow with the prompt, so the hint is a shorter one."""
    from ..store.resources import available_memory, check_memory

    needed, memory = graph_memory(n_sources, n_features, n_logits), available_memory()
    if memory is None or needed <= memory:
        return
    fit = max(1, int(n_tokens * (memory / needed) ** 0.5))
    check_memory(
        needed,
        f"the attribution graph of {n_tokens} tokens ({n_sources:,} sources)",
        f"a prompt of about {fit} tokens would fit",
        memory,
    )


def attribute(
    model,
    transcoders: list[Transcoder],
    tokens,
    max_n_logits: int = 10,
    desired_logit_prob: float = 0.95,
    batch: int = 256,
    keep: tuple[str, ...] = (),
    heads=None,
) -> Graph:
    """The attribution graph of `tokens` (T,) on `model` with `transcoders` for its MLPs.
    `keep` names activations (hook names) whose per-source contributions to also return, in
    `graph.extras["contributions"][name]` (n_sources, ...), with the all-off value in
    `graph.extras["baseline"][name]` (the QK attribution reads hook_q and hook_k). `heads`: only
    the paths through those heads (Replacement's)."""
    rep = Replacement(model, transcoders, tokens, heads)
    logit_tokens, logit_probs = salient_logits(rep.logits[-1], max_n_logits, desired_logit_prob)
    n_s, n_f, k = rep.n_sources, rep.n_features, len(logit_tokens)
    check_graph_memory(n_s, n_f, k, len(rep.tokens))
    target_inputs = np.zeros((n_s + 1, n_f + k))  # row 0: all off; row 1 + s: source s alone
    kept = {name: [] for name in keep}
    coef_rows = np.vstack([np.zeros(n_s), np.eye(n_s)])
    for start in range(0, n_s + 1, batch):
        logits, cache = rep.run(coef_rows[start : start + batch])
        rows = slice(start, start + len(logits))
        target_inputs[rows, :n_f] = rep.feature_inputs(cache)
        target_inputs[rows, n_f:] = rep.logit_inputs(logits, logit_tokens)
        for name in keep:
            kept[name].append(cache[name])
    base, effects = target_inputs[0], target_inputs[1:] - target_inputs[0]  # (n_s, n_targets)
    n = n_s + k
    adjacency = np.zeros((n, n))
    adjacency[:n_f, :n_s] = effects[:, :n_f].T
    adjacency[n_s:, :n_s] = effects[:, n_f:].T
    bias = np.zeros(n)
    bias[:n_f], bias[n_s:] = base[:n_f], base[n_f:]
    inputs = np.zeros(n)
    if n_f:
        inputs[:n_f] = rep.feature_inputs(
            {tc.hook_in: rep.cache[tc.hook_in] for tc in transcoders}
        )[0]
    inputs[n_s:] = Replacement.logit_inputs(rep.logits[None], logit_tokens)[0]
    graph = Graph(
        rep.tokens,
        rep.features,
        rep.activations,
        rep.error_layers,
        logit_tokens,
        logit_probs,
        adjacency,
        bias,
        inputs,
        model.cfg.n_layers,
    )
    if keep:
        stacked = {name: np.concatenate(v) for name, v in kept.items()}
        graph.extras["baseline"] = {name: a[0] for name, a in stacked.items()}
        graph.extras["contributions"] = {name: a[1:] - a[0] for name, a in stacked.items()}
    graph.extras["replacement"] = rep
    return graph
