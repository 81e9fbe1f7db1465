"""What a circuit search costs before it starts, and the part of the held-out set it can afford.

Exact edge ablation runs the edge graph's forward pass once per variant: every edge ablated
alone, every prefix of the ranking for the greedy circuit, ACDC's trials, the circuit's drops,
about SEARCH_PASSES x n_edges variants in all. One variant's cost grows with the prompts x their
tokens x (the edges each receiver sums, the heads' and MLPs' products), so a model of a
vocabulary of 400 and a context of 64 already needs minutes for 200 full-length prompts. The
estimate below is what `flatformer circuits`, `analyze` and `explore` check before starting:
within budget they measure as asked; past it they take fewer prompts, then shorter ones (each
held-out window's first tokens), and say so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .graph import EdgeGraph

SEARCH_PASSES = 4  # variants per edge: its exact effect, a prefix, an ACDC trial, a drop
# Work units (multiply-adds, and a pass over an array counted as its length) per second of the
# edge graph's NumPy forward pass: measured on a 155,392-parameter model on a 2-core machine
# under load, so an estimate leans long.
UNITS_PER_SECOND = 1.5e9
BUDGET_SECONDS = 60.0  # what a default circuit search may take
MIN_PROMPTS = 16  # fewer make a noisy circuit: shorten the prompts first
MIN_LENGTH = 8  # the shortest prompts a search is cut to


@dataclass
class Scope:
    """The prompts a circuit search measures on: how many, how long (None: the held-out
    windows whole), its estimated seconds, and whether the default was narrowed."""

    prompts: int
    length: int | None
    seconds: float
    narrowed: bool

    def note(self, width: int) -> str:
        """How the prompts were chosen, for the report's line."""
        cut = f" cut to their first {self.length} tokens" if self.length else ""
        return f"{self.prompts} held-out prompts of {self.length or width} tokens{cut}"


def readouts_of(positions: str, T: int) -> int:
    """Positions a prompt of T tokens is read at: one (`last`), or every one after the first
    (`all`)."""
    return max(1, T - 1) if positions == "all" else 1


def unit_work(cfg, graph: EdgeGraph, T: int, positions: str = "last") -> float:
    """Work of one prompt of T tokens in one variant of the edge graph's forward pass: every
    token through the blocks, and at each position read (`positions`, readouts_of) the last
    block's query, its MLP and the logits."""
    d, H, dh, m = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp
    reads = (graph.n_edges + 2 * len(graph.receivers)) * d  # sums of edges, LayerNorms
    heads = cfg.n_layers * H * (3 * d * dh + 2 * T * dh + dh * d)
    mlps = 0 if cfg.attn_only else cfg.n_layers * 3 * d * m
    last = H * (d * dh + 2 * T * dh + dh * d) + (0 if cfg.attn_only else 3 * d * m)
    readouts = readouts_of(positions, T)
    return T * (reads + heads + mlps) + readouts * cfg.vocab_out * d + (readouts - 1) * last


def search_seconds(cfg, graph: EdgeGraph, prompts: int, T: int, positions: str = "last") -> float:
    """Estimated seconds of a circuit search (exact effects, greedy circuit, ACDC) on `prompts`
    prompts of T tokens, read at `positions` (last or all)."""
    variants = SEARCH_PASSES * graph.n_edges + 8
    return variants * prompts * unit_work(cfg, graph, T, positions) / UNITS_PER_SECOND


def choose_scope(
    model,
    width: int,
    prompts: int,
    length: int | None = None,
    budget: float = BUDGET_SECONDS,
    positions: str = "last",
) -> Scope:
    """The prompts a search affords within `budget` seconds: `prompts` of `length` tokens
    (None: `width`, the held-out windows' own) when they fit, else fewer (at least
    MIN_PROMPTS), then shorter (halving, down to MIN_LENGTH). Given a `length`, only the count
    is narrowed. A Scope that still does not fit has `seconds` above `budget`. `positions`
    all reads every position of a prompt, each a readout of the last block and the logits."""
    graph = EdgeGraph(model)
    T = min(length or width, width)

    def seconds(n: int, T: int) -> float:
        return search_seconds(model.cfg, graph, n, T, positions)

    def fit(T: int) -> int:
        return int(min(budget / max(seconds(1, T), 1e-12), prompts))

    n = min(prompts, fit(T))
    if n < MIN_PROMPTS and length is None:
        while T > MIN_LENGTH and fit(T) < min(prompts, MIN_PROMPTS):
            T = max(MIN_LENGTH, T // 2)
        n = min(prompts, fit(T))
    n = max(1, min(prompts, max(n, MIN_PROMPTS)))
    cut = T if T < width else None
    return Scope(
        n, cut, seconds(n, T), narrowed=n < prompts or (cut is not None and length is None)
    )


def cut_windows(data, length: int | None):
    """The held-out set (a TaskData) with every window cut to its first `length` tokens, and
    only the rule windows whose prediction falls inside them: the prompts and the mean
    ablation of a shortened search. Unchanged for None."""
    if not length:
        return data
    keep = np.asarray(data.rule_index) < length
    return dataclasses.replace(
        data,
        val_inputs=data.val_inputs[:, :length],
        val_targets=data.val_targets[:, :length],
        val_weights=data.val_weights[:, :length],
        rule_inputs=data.rule_inputs[keep, :length],
        rule_index=data.rule_index[keep],
        rule_targets=data.rule_targets[keep],
        rule_allowed=data.rule_allowed[keep],
        rule_total=int(keep.sum()),
    )
