"""Which algorithm a modular-addition model learned: the mechanism measures of Zhong, Liu,
Tegmark and Andreas 2023 ("The Clock and the Pizza: Two Stories in Mechanistic Explanation of
Neural Networks", NeurIPS 2023), with the names of their published per-run tables
(`result/1l_fixedwidth.csv` and `result/1l_varywidth.csv` in the fjzzq2002/pizza repository):
`gradient_sim`, `distance_irrelevance` and `circularity`.

Each measure follows the paper's definition (section 4) and, where the paper leaves a choice
open, the code that made the published columns (`code/eval-main.ipynb`): the 100 triples of
the gradient symmetricity, the correct logits of the distance irrelevance, the first four
principal components of the circularity.

Their model reads `a b` and answers at b; flatformer's task reads `a b =` and answers at `=`
(their appendix's `eqn_sign` variant). The number embeddings are W_E's first p rows.

Beside the paper's three, `mechanism_measures` gives flatformer's grokking measures of the same
model (analysis/grokking.py, Nanda et al. 2023): the key frequencies, the restricted and the
excluded loss. Arrays in, numbers out; nothing here draws.
"""

from __future__ import annotations

import itertools
import random

import numpy as np

from ..config import ModelConfig
from ..engine.params import Params
from ..errors import FlatformerError
from . import grokking as G

# The sample of the gradient symmetricity: eval-main.ipynb shuffles every triple (a, b, c)
# with Python's random.Random(42) and keeps the first 100.
PAPER_SEED, PAPER_TRIPLES = 42, 100
# The circularity reads the first four principal components of the embedding (first_k = 4).
PAPER_COMPONENTS = 4
# Which algorithm: the paper names a model a pizza by a distance irrelevance in 0-0.4 and a
# clock in 0.4-1 (grokking.CLOCK_ABOVE). The gradient symmetricity must agree: the pizza's
# logits see only E_a + E_b (symmetricity near 1), the clock's multiply E_a and E_b. Its split,
# 0.98, is ours, read off the published fixed-width table: of its one-layer runs (p = 59,
# d_model 128, no diff_vocab or eqn_sign), every one with an attention rate below 0.1 has a
# gradient_sim of at least 0.990, every one at 0.9 or above at most 0.736.
PIZZA_BELOW = G.CLOCK_ABOVE
SYMMETRIC_ABOVE = 0.98
# Like the paper's tables, only a model that adds gets a name: 99% of all p^2 pairs right.
ACCURATE = 0.99
KINDS = ("clock", "pizza", "other")


def _weights(model_or_params, cfg: ModelConfig | None, task) -> tuple[Params, int]:
    """One-seed Params of a Transformer, one-seed Params or a dict of tensors, and the task's
    p, after checking that the model reads the task's `a b =`."""
    p = getattr(task, "p", None)
    if getattr(task, "name", None) != "modular-addition" or not isinstance(p, int):
        raise FlatformerError(
            "the clock and pizza measures are defined for modular addition only, got task "
            f"{getattr(task, 'name', task)!r}"
        )
    if isinstance(model_or_params, Params):
        if model_or_params.n_seeds != 1:
            raise FlatformerError(
                f"mechanism measures take one model, got {model_or_params.n_seeds} seeds"
            )
        cfg = cfg or model_or_params.cfg
        tensors = model_or_params.seed(0)
    elif isinstance(model_or_params, dict):
        tensors = model_or_params
    else:  # a Transformer (transformer.py): its config and tensors
        cfg = cfg or model_or_params.cfg
        tensors = model_or_params.tensors
    if cfg is None:
        raise FlatformerError("mechanism measures need the model's config with its tensors")
    if cfg.d_vocab != p + 1 or cfg.n_ctx != 3:
        raise FlatformerError(
            f"this model does not read modular addition's `a b =` at p = {p}: vocabulary "
            f"{cfg.d_vocab} (want {p + 1}), context {cfg.n_ctx} (want 3)"
        )
    return Params.stack(cfg, [tensors]), p


def paper_triples(p: int, n: int = PAPER_TRIPLES, seed: int = PAPER_SEED) -> np.ndarray:
    """The triples (a, b, c) the gradient symmetricity averages over, (n, 3): eval-main.ipynb's
    sample, every triple of Z_p^3 in order shuffled by Python's random.Random(seed), the first
    n kept, so that at p = 59 the sample is the one behind the published `gradient_sim`."""
    triples = list(itertools.product(range(p), repeat=3))
    random.Random(seed).shuffle(triples)
    return np.array(triples[:n], dtype=np.int64)


def gradient_symmetricity(model_or_params, cfg: ModelConfig | None, task) -> float:
    """The gradient symmetricity (Zhong et al. 2023, section 4.2, the published `gradient_sim`):
    over the paper's 100 triples (a, b, c), the mean cosine similarity of the gradients of the
    logit of c with respect to the input embeddings of a and of b. The pizza's logits depend on
    E_a + E_b, so its two gradients are equal (symmetricity 1); the clock's multiply E_a and E_b
    (an exact clock on one circle gives cos(w (a - b)), about 0 on average)."""
    params, p = _weights(model_or_params, cfg, task)
    return G.gradient_symmetricity(params, p, triples=paper_triples(p))


def distance_irrelevance(model_or_params, cfg: ModelConfig | None, task) -> float:
    """The distance irrelevance (Zhong et al. 2023, section 4.2, the published
    `distance_irrelevance`): each pair's logit of its correct answer placed at row (a + b) mod
    p, column (a - b) mod p; the mean over the columns of the standard deviation within a
    column, over the standard deviation of all (grokking.distance_irrelevance, as eval-main.ipynb
    computes it). Near 0 for the pizza, whose correct logit depends on the distance a - b; near
    1 for the clock, whose correct logit does not."""
    params, p = _weights(model_or_params, cfg, task)
    return G.distance_irrelevance(G.pair_logits(params, p)[0], p)


def embedding_circularity(W_E: np.ndarray, p: int, components: int = PAPER_COMPONENTS) -> float:
    """The circularity of a number embedding W_E (p, d): for each of its first `components`
    principal components (fewer when the embedding has fewer), the score vector x (p,) scaled
    to norm 1 / sqrt(p), and the largest over i = 1 .. p - 1 of 2 |sum_t x[t i mod p]
    e^(2 pi i t / p)|^2, capped to [0, 1]; their mean (eval-main.ipynb's circularity, its 59
    written as p). 1 when every component is a pure wave cos(w t + phi): a circle."""
    W = np.asarray(W_E, dtype=np.float64)[:p]
    centred = W - W.mean(0)
    U, sv, _ = np.linalg.svd(centred, full_matrices=False)
    kept = min(components, int((sv > 1e-12 * max(sv.max(initial=0.0), 1e-300)).sum()))
    if kept == 0:
        return 0.0
    t = np.arange(p)
    wave = np.exp(2j * np.pi * t / p)
    index = (t[None, :] * np.arange(1, p)[:, None]) % p  # (p - 1, p): t i mod p
    total = 0.0
    for j in range(kept):
        x = U[:, j] * sv[j]  # the component's scores (sklearn's PCA.fit_transform)
        x = x / np.linalg.norm(x) / np.sqrt(p)
        best = (2 * np.abs(x[index] @ wave) ** 2).max()
        total += min(max(best, 0.0), 1.0)
    return float(total / kept)


def circularity(model_or_params, cfg: ModelConfig | None, task) -> float:
    """The circularity (Zhong et al. 2023, the published `circularity`) of the model's number
    embedding, W_E's first p rows (embedding_circularity)."""
    params, p = _weights(model_or_params, cfg, task)
    return embedding_circularity(params["embed.W_E"][0], p)


def classify(gradient_sim: float, distance_irrelevance: float, accuracy: float = 1.0) -> str:
    """ "clock", "pizza" or "other": a pizza has a distance irrelevance below 0.4 (the paper's
    split) and a gradient symmetricity of at least 0.98, a clock the opposite of both; a model
    whose two measures disagree, or that gets fewer than 99% of the pairs right, is "other"."""
    if accuracy < ACCURATE:
        return "other"
    symmetric = gradient_sim >= SYMMETRIC_ABOVE
    if distance_irrelevance < PIZZA_BELOW and symmetric:
        return "pizza"
    if distance_irrelevance >= PIZZA_BELOW and not symmetric:
        return "clock"
    return "other"


def mechanism_measures(model_or_params, cfg: ModelConfig | None, task, data_seed: int = 0):
    """Every mechanism measure of one modular-addition model, dict[str, float] but for two
    strings: the paper's `gradient_sim`, `distance_irrelevance`, `circularity` and `kind`
    (classify); `accuracy` over all p^2 pairs; and flatformer's grokking measures:
    `key_frequencies` (space-separated, grokking.key_frequencies), `n_key_frequencies`,
    `restricted_loss` (over all pairs) and `excluded_loss` (over the training pairs of the
    task's split at `data_seed`), as Nanda et al. 2023 define them."""
    params, p = _weights(model_or_params, cfg, task)
    logits = G.pair_logits(params, p)[0]
    pairs = G.all_pairs(p)
    targets = (pairs[:, 0] + pairs[:, 1]) % p
    accuracy = float((logits[:, :p].argmax(-1) == targets).mean())
    keys = G.key_frequencies(params.seed(0), p)
    train, _ = task.pairs(data_seed)
    gradient_sim = G.gradient_symmetricity(params, p, triples=paper_triples(p))
    irrelevance = G.distance_irrelevance(logits, p)
    return {
        "gradient_sim": gradient_sim,
        "distance_irrelevance": irrelevance,
        "circularity": embedding_circularity(params["embed.W_E"][0], p),
        "kind": classify(gradient_sim, irrelevance, accuracy),
        "accuracy": accuracy,
        "key_frequencies": " ".join(map(str, keys)),
        "n_key_frequencies": float(len(keys)),
        "restricted_loss": float(G.losses(G.restricted_logits(logits, p, keys), targets)),
        "excluded_loss": float(G.losses(G.excluded_logits(logits, p, keys)[train], targets[train])),
    }
