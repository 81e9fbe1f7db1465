"""Cross-validated Mahalanobis distances (crossnobis) from repeated measurements, the noise
precision they whiten with, and the model's own repeated measurements (held-out windows of one
condition)."""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError

NOISE_METHODS = ("shrinkage_diag", "shrinkage_eye", "diag", "identity")
MAX_WINDOWS_PER_CONDITION = 100


def _residuals(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Each measurement minus its stimulus's mean over repeats: (stimuli * repeats, channels),
    with stimuli x (repeats - 1) degrees of freedom."""
    n, r, c = x.shape
    res = (x - x.mean(1, keepdims=True)).reshape(n * r, c)
    return res - res.mean(0), n * (r - 1)


def noise_covariance(x, method: str = "shrinkage_diag") -> np.ndarray:
    """Channel x channel noise covariance from the residuals of stimuli x repeats x channels.
    "shrinkage_diag": the sample covariance with its off-diagonal shrunk towards 0 by the
    optimal weight of Schäfer & Strimmer 2005 ("A shrinkage approach to large-scale covariance
    matrix estimation", target D); "shrinkage_eye": shrunk towards a multiple of the identity
    (Ledoit & Wolf 2004, "A well-conditioned estimator for large-dimensional covariance
    matrices"); "diag": the variances only; "identity": no whitening (crossnobis is then the
    cross-validated squared Euclidean distance). The estimators follow rsatoolbox's
    `cov_from_residuals` term by term, the choice Walther et al. 2016 recommend."""
    if method not in NOISE_METHODS:
        raise FlatformerError(f"--noise must be one of {', '.join(NOISE_METHODS)}, got {method!r}")
    x = np.asarray(x, dtype=np.float64)
    res, dof = _residuals(x)
    m, c = res.shape
    if method == "identity":
        return np.eye(c)
    s_sum = res.T @ res
    if method == "diag":
        return np.diag(np.diag(s_sum) / dof)
    sq = res * res
    s2_sum = sq.T @ sq
    if method == "shrinkage_eye":
        s = s_sum / m
        b2 = np.sum(s2_sum / m - s * s) / m
        mu = np.trace(s) / c
        d2 = np.sum((s - mu * np.eye(c)) ** 2)
        b2 = min(d2, b2)
        return (b2 / d2 * mu * np.eye(c) + (d2 - b2) / d2 * s) * m / dof
    s = s_sum / dof
    var = np.diag(s)
    std = np.sqrt(var)
    r_mean = s_sum / np.outer(std, std) / (m - 1)
    r2_mean = s2_sum / np.outer(var, var) / (m - 1)
    var_hat = m / dof**2 * (r2_mean - r_mean**2)
    off = ~np.eye(c, dtype=bool)
    lam = min(max(var_hat[off].sum() / (r_mean[off] ** 2).sum(), 0.0), 1.0) if c > 1 else 1.0
    return s * (np.eye(c) + (1 - lam) * off)


def noisy_channels(x) -> np.ndarray:
    """The channels that vary across repeats: along a noise-free channel the Mahalanobis
    distance is undefined (zero noise variance), so crossnobis leaves it out."""
    res, _ = _residuals(np.asarray(x, dtype=np.float64))
    return (res * res).sum(0) > 1e-20 * max((res * res).sum(), 1e-300)


def crossnobis_rdm(x, precision=None) -> np.ndarray:
    """Crossnobis: for stimuli x repeats x channels, the mean over ordered pairs of distinct
    repeats a != b of (x_ia - x_ja) P (x_ib - x_jb)^T / channels, P the noise precision
    (identity if None) (Walther et al. 2016, "Reliability of dissimilarity measures for
    multi-voxel pattern analysis"; Nili et al. 2014). Leave-one-repeat-out as rsatoolbox's
    `calc_rdm(..., method="crossnobis")` computes it, to which it is equal (tested). Unbiased:
    repeats of identical patterns with independent noise give 0 in expectation, so entries can
    be negative (a negative distance means "no difference beyond the noise")."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 3 or x.shape[1] < 2:
        raise FlatformerError(
            f"crossnobis needs stimuli x repeats x channels with >= 2 repeats, got shape {x.shape}"
        )
    n, r, c = x.shape
    p = np.eye(c) if precision is None else np.asarray(precision, dtype=np.float64)
    # sum over a != b of d_a P d_b = (sum_a d_a) P (sum_a d_a) - sum_a d_a P d_a, each side a
    # squared Mahalanobis distance read off a Gram matrix: no (pairs, repeats, channels) array
    total = x.sum(1)
    gram = total @ p @ total.T
    own = np.einsum("nrc,cd,mrd->nm", x, p, x, optimize=True)

    def dist(g):
        d = np.diag(g)
        return d[:, None] + d[None] - g - g.T

    i, j = np.triu_indices(n, 1)
    return (dist(gram) - dist(own))[i, j] / (r * (r - 1)) / c


def whitened_crossnobis(x, method: str = "shrinkage_diag") -> tuple[np.ndarray, int]:
    """(crossnobis RDM whitened by the noise precision of `x` itself, channels left out for
    having no noise)."""
    x = np.asarray(x, dtype=np.float64)
    keep = noisy_channels(x)
    if not keep.any():
        raise FlatformerError("crossnobis: no channel varies across repeats (no noise to whiten)")
    x = x[:, :, keep]
    precision = np.linalg.inv(noise_covariance(x, method))
    return crossnobis_rdm(x, precision), int((~keep).sum())


def window_conditions(run, limit: int = MAX_WINDOWS_PER_CONDITION):
    """The model's repeated measurements: conditions = the answer the rule forces (held-out
    rule windows whose target is one token), repeats = independently drawn windows of that
    condition, read at the rule position, the first m of each condition with m the smallest
    count (capped at `limit`), so every repeat index is one fold. The context around the
    answer varies from window to window: it is the "noise" crossnobis cross-validates over, as
    trials of one condition are in an experiment (Walther et al. 2016; Diedrichsen &
    Kriegeskorte 2017, "Representational models"). Returns (tokens (C * m, T), read, labels,
    m), windows ordered condition-major."""
    data = run.data()
    targets = np.asarray(data.rule_targets)
    values, counts = np.unique(targets[targets >= 0], return_counts=True)
    values = values[counts >= 2]
    if len(values) < 3:
        raise FlatformerError(
            f"task {run.task.name}: fewer than 3 forced answers with 2 or more held-out "
            f"windows each, so the model has no repeated measurements for crossnobis"
        )
    m = min(limit, int(min(counts[counts >= 2])))
    rows = np.concatenate([np.flatnonzero(targets == v)[:m] for v in values])
    labels = [run.vocab[v] for v in values]
    return data.rule_inputs[rows], np.asarray(data.rule_index)[rows], labels, m


def model_crossnobis(run, step=None, method: str = "shrinkage_diag") -> dict:
    """JSON-ready: per activation the crossnobis RDM over the rule-target conditions
    (`window_conditions`), whitened by that activation's own within-condition noise."""
    from .stimuli import representations

    tokens, read, labels, m = window_conditions(run)
    reps = representations(run.model(run.resolve_step(step)), tokens, read)
    rdms, dropped = {}, {}
    for name, x in reps.items():
        x = x.reshape(len(labels), m, -1)
        if not noisy_channels(x).any():
            continue  # the same in every window of a condition: no noise to cross-validate
        rdm, dropped[name] = whitened_crossnobis(x, method)
        rdms[name] = rdm.tolist()
    return {
        "conditions": labels,
        "condition": "the answer the rule forces (held-out rule windows)",
        "repeats": m,
        "noise": method,
        "rdms": rdms,
        "dropped_channels": dropped,
    }
