"""Central differences against the hand-written backward pass, on random entries of every tensor."""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig
from .model import backward, cross_entropy, forward, init_params

THRESHOLD = 1e-6  # worst relative error a correct float64 backward stays far below (~1e-9)


def gradcheck(cfg: ModelConfig, entries: int = 6, seed: int = 0, h: float = 1e-5):
    """Worst relative error per tensor, {name: error}, for a random batch and random weights.

    The relative error of an entry is |analytic - numeric| / max(|analytic| + |numeric|, 1e-6):
    entries whose gradient is near zero are judged on absolute error instead.
    """
    rng = np.random.default_rng(seed)
    params = init_params(cfg, [rng])
    for name, view in params.views.items():  # move LayerNorm off its identity start
        if "ln" in name:
            view += 0.3 * rng.standard_normal(view.shape)
    tokens = rng.integers(0, cfg.d_vocab, (1, 4, cfg.n_ctx))
    targets = rng.integers(0, cfg.d_vocab, tokens.shape)
    weights = np.ones(tokens.shape)

    def loss_at():
        return cross_entropy(forward(params, tokens)[0], targets, weights)[0][0]

    logits, cache = forward(params, tokens)
    grads = backward(params, cache, cross_entropy(logits, targets, weights)[1])
    worst = {}
    for name, view in params.views.items():
        flat_view, flat_grad = view.reshape(-1), grads[name].reshape(-1)
        errors = []
        for i in rng.choice(flat_view.size, min(entries, flat_view.size), replace=False):
            keep = flat_view[i]
            flat_view[i] = keep + h
            up = loss_at()
            flat_view[i] = keep - h
            down = loss_at()
            flat_view[i] = keep
            numeric, analytic = (up - down) / (2 * h), flat_grad[i]
            errors.append(abs(analytic - numeric) / max(abs(analytic) + abs(numeric), 1e-6))
        worst[name] = max(errors)
    return worst
