"""The one sampler: temperature, top-k and top-p, a seeded draw that is shown, greedy decoding,
and generation that slides the context window. `explorer/model.js` implements the same steps
(with its own seeded generator, mulberry32, for the draws).

One step: probabilities p = softmax(logits / T); top-k keeps the k likeliest tokens (ties go to
the lower token index, the one argmax picks, so top-k 1 is greedy); top-p keeps the smallest set
of likeliest tokens whose probability reaches p; the kept probabilities are renormalised; a draw
u ~ U[0, 1) picks the first token whose cumulative probability (in vocabulary order) exceeds u.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FlatformerError
from ..store.limits import MAX_TOKENS, whole
from ..model.transformer import Transformer
from .knobs import Hooks
from .probs import entropy as _entropy
from .probs import softmax


def check_settings(temperature: float, top_k: int | None, top_p: float | None):
    if not np.isfinite(temperature) or temperature < 0:
        raise FlatformerError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise FlatformerError(f"top-k must be >= 1, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise FlatformerError(f"top-p must be in (0, 1], got {top_p}")


def distribution(
    logits: np.ndarray,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> np.ndarray:
    """The probabilities (V,) a sampler with these settings draws from. Temperature 0 puts all
    the mass on the argmax."""
    check_settings(temperature, top_k, top_p)
    logits = np.asarray(logits, dtype=float)
    if not np.isfinite(logits).all():
        raise FlatformerError(
            "the model's next-token logits are not finite (its weights are so large that the "
            "forward pass overflows): there is no distribution to sample from"
        )
    if temperature == 0:
        probs = np.zeros_like(logits)
        probs[int(np.argmax(logits))] = 1.0
        return probs
    scaled = logits / temperature
    if not np.isfinite(scaled).all():  # a tiny temperature: the same softmax, shifted first
        scaled = (logits - logits.max()) / temperature
    probs = softmax(scaled)
    order = np.argsort(-logits, kind="stable")  # likeliest first; ties: lower index first
    keep = np.ones(len(probs), dtype=bool)
    if top_k is not None and top_k < len(probs):
        keep[order[top_k:]] = False
    if top_p is not None:
        ranked = np.where(keep[order], probs[order], 0.0)
        # The smallest prefix reaching top_p: tokens whose preceding mass is already >= top_p go.
        before = np.cumsum(ranked) - ranked
        keep[order[before >= top_p * ranked.sum() * (1 - 1e-12)]] = False
        keep[order[0]] = True
    probs = np.where(keep, probs, 0.0)
    return probs / probs.sum()


def entropy(probs: np.ndarray) -> float:
    """Entropy in nats of one distribution; exp(entropy) is the number of effective choices."""
    return float(_entropy(probs))


def draw(probs: np.ndarray, u: float) -> int:
    """The token a uniform draw u in [0, 1) picks by inverse CDF over the vocabulary order."""
    cdf = np.cumsum(probs)
    token = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    # Rounding can leave u just above the last cumulative value: fall back to the last kept token.
    return min(token, int(np.flatnonzero(probs > 0)[-1]))


@dataclass
class Step:
    """One generated token and how it was chosen."""

    token: int
    probability: float  # of the chosen token under the distribution it was drawn from
    entropy: float  # nats, of that distribution (greedy: of the model's softmax)
    u: float | None  # the raw uniform draw (None when greedy)
    position: int  # where in the window the prediction was read


def generate(
    model: Transformer,
    tokens,
    n: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    greedy: bool = False,
    hooks: Hooks | None = None,
) -> list[Step]:
    """`n` new tokens after `tokens`. The model reads at most its context (n_ctx) tokens, so a
    longer prompt, and the growing sequence, are read through a window over the last n_ctx."""
    check_settings(temperature, top_k, top_p)
    whole("-n", n, 0, MAX_TOKENS)
    seq = [int(t) for t in np.asarray(tokens).reshape(-1)]
    if not seq:
        raise FlatformerError("the prompt is empty")
    model.check_tokens(np.asarray(seq[-model.cfg.n_ctx :]))
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(n):
        window = np.asarray(seq[-model.cfg.n_ctx :])
        logits = model(window, hooks)[0, -1]
        if greedy or temperature == 0:
            # Greedy draws nothing; report the model's own distribution, which it summarises.
            token = int(np.argmax(logits))
            probs, u = distribution(logits, 1.0), None
        else:
            probs = distribution(logits, temperature, top_k, top_p)
            u = float(rng.random())
            token = draw(probs, u)
        steps.append(Step(token, float(probs[token]), entropy(probs), u, len(window) - 1))
        seq.append(token)
    return steps


def continue_prompts(
    model: Transformer, prompts, length: int, seed: int = 0, temperature: float = 1.0
) -> np.ndarray:
    """Each prompt (B, P) continued to `length` tokens by `generate` (prompt i with seed
    `seed + i`): (B, length)."""
    prompts = np.asarray(prompts, dtype=np.int64)
    n = max(length - prompts.shape[1], 0)
    return np.array(
        [
            list(p) + [s.token for s in generate(model, p, n, temperature, seed=seed + i)]
            for i, p in enumerate(prompts)
        ],
        dtype=np.int64,
    ).reshape(len(prompts), -1)
