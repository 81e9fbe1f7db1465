"""Against the truth: activations built from features known to be there, and how many of them a
dictionary's decoder found.

The generator is the toy model of superposition's data (Elhage et al. 2022, "Toy Models of
Superposition", Section 2; Sharkey et al. 2022's planted-features set-up): K unit directions
in d < K dimensions, each active independently with probability p (expected L0 = K p) at a
magnitude drawn from Uniform(0.5, 1.5); x = sum of the active ones.

The score is the mean correlation coefficient (MCC) of O'Neill et al. 2024 ("Compute Optimal
Inference and Provable Amortisation Gap in Sparse Autoencoders"; as SAELens's
`synthetic.evals.mean_correlation_coefficient`): the absolute cosine between every decoder row
and every true direction, matched one to one by the Hungarian algorithm
(`scipy.optimize.linear_sum_assignment`), averaged over the matched pairs. What the MCC hides,
reported beside it: a true feature `recovered` when some latent's cosine with it is at least
`match` (0.9), `missed` when none is, `split` when several are; and `coverage`, the sum of
matched cosines over K (a narrow dictionary's unmatched features count 0 there, while the MCC
averages over the min(m, K) pairs it has).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MATCH = 0.9


@dataclass
class Planted:
    x: np.ndarray  # (N, d) activations
    codes: np.ndarray  # (N, K) the true sparse code
    features: np.ndarray  # (K, d) unit rows


def planted_features(n_features: int, d: int, n_samples: int, l0: float, seed: int = 0) -> Planted:
    """N samples of sparse combinations of K random unit directions in d dimensions, each
    feature active with probability l0 / K at a magnitude in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((n_features, d))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    on = rng.random((n_samples, n_features)) < l0 / n_features
    codes = on * rng.uniform(0.5, 1.5, (n_samples, n_features))
    return Planted(codes @ features, codes, features)


def abs_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|cos| between every row of a (m, d) and every row of b (K, d); a zero row scores 0."""
    na = np.linalg.norm(a, axis=1, keepdims=True)
    nb = np.linalg.norm(b, axis=1, keepdims=True)
    return np.abs((a / np.where(na > 0, na, 1)) @ (b / np.where(nb > 0, nb, 1)).T)


def mcc(decoder: np.ndarray, features: np.ndarray) -> float:
    """The MCC: mean |cos| over the Hungarian matching of decoder rows to true features."""
    from scipy.optimize import linear_sum_assignment

    cos = abs_cosines(decoder, features)
    rows, cols = linear_sum_assignment(1 - cos)
    return float(cos[rows, cols].mean())


def truth_report(decoder: np.ndarray, features: np.ndarray, match: float = MATCH) -> dict:
    """The MCC and what it hides: recovered, missed and split true features, coverage, and the
    latents that match no true feature."""
    from scipy.optimize import linear_sum_assignment

    cos = abs_cosines(decoder, features)  # (m, K)
    rows, cols = linear_sum_assignment(1 - cos)
    hits = cos >= match
    per_feature = hits.sum(0)
    return {
        "mcc": float(cos[rows, cols].mean()),
        "coverage": float(cos[rows, cols].sum() / features.shape[0]),
        "recovered": int((per_feature >= 1).sum()),
        "missed": int((per_feature == 0).sum()),
        "split": int((per_feature >= 2).sum()),
        "unmatched_latents": int((~hits.any(1)).sum()),
        "features": int(features.shape[0]),
        "latents": int(decoder.shape[0]),
    }
