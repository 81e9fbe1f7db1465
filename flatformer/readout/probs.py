"""Distributions from logits, and the measures between them, in nats: softmax, log-softmax,
entropy and the KL divergence. The knobs, the sampler, the landscape, the trace, the logit
lens and the edges' metrics read these, and `explorer/model.js` implements the same formulas.

KL direction. An intervention's cost is KL(original || changed) = sum_i p_i log(p_i / q_i),
with p the original next-token distribution and q the changed one: the expected extra surprise,
under the model's own predictions, of predicting with the changed model (the direction ACDC,
Conmy et al. 2023, uses for its metric). `knob_kl` names that direction once.
"""

from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities (..., V) of logits (..., V), computed stably."""
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def entropy(probs: np.ndarray) -> np.ndarray:
    """Entropy in nats of distributions (..., V) -> (...); exp(entropy) is the number of
    effective choices. Zero-probability entries add nothing."""
    p = np.asarray(probs, dtype=np.float64)
    terms = np.where(p > 0, -p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return np.maximum(terms.sum(-1), 0.0)  # never -0.0


def kl_divergence(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    """KL(p || q) in nats between the distributions of two logit arrays (..., V) -> (...)."""
    log_p, log_q = log_softmax(p_logits), log_softmax(q_logits)
    # Mathematically >= 0; rounding can leave -1e-16 when the two are equal.
    return np.maximum((np.exp(log_p) * (log_p - log_q)).sum(-1), 0.0)


KL_DIRECTION = "KL(original || changed)"


def knob_kl(original: np.ndarray, changed: np.ndarray) -> np.ndarray:
    """The cost of an intervention: KL(original || changed) of the logits (..., V)."""
    return kl_divergence(original, changed)
