"""Dissimilarities and comparisons of representations (stimuli x units), each its published
definition. RDMs are returned as condensed upper-triangle vectors (row-major, i < j), the
layout rsatoolbox's `RDMs.dissimilarities` uses."""

from __future__ import annotations

import numpy as np
from scipy.stats import kendalltau, rankdata

from ..errors import FlatformerError


def _matrix(x, name="representation") -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 3:
        raise FlatformerError(
            f"{name} must be stimuli x units with at least 3 stimuli, got shape {x.shape}"
        )
    return x


def _upper(square: np.ndarray) -> np.ndarray:
    i, j = np.triu_indices(square.shape[0], 1)
    return square[i, j]


def euclidean_rdm(x) -> np.ndarray:
    """Squared Euclidean distance per unit, ||x_i - x_j||^2 / units (rsatoolbox's 'euclidean'
    RDM: Nili et al. 2014, "A toolbox for representational similarity analysis")."""
    x = _matrix(x)
    sq = (x * x).sum(1)
    d = sq[:, None] + sq[None] - 2 * x @ x.T
    return np.maximum(_upper(d), 0) / x.shape[1]


def correlation_rdm(x) -> np.ndarray:
    """1 - Pearson correlation between stimulus patterns (Kriegeskorte, Mur & Bandettini 2008).
    A constant pattern has no correlation: its distances are 1 (no information)."""
    x = _matrix(x)
    c = x - x.mean(1, keepdims=True)
    norm = np.linalg.norm(c, axis=1)
    norm[norm == 0] = np.inf
    c = c / norm[:, None]
    return 1 - _upper(c @ c.T)


def spearman(a, b) -> float:
    """Spearman's rank correlation of two RDM vectors (Nili et al. 2014)."""
    return float(np.corrcoef(rankdata(a), rankdata(b))[0, 1])


def spearman_matrix(vectors) -> np.ndarray:
    """Spearman's correlation between every pair of RDM vectors, each ranked once."""
    return np.corrcoef(rankdata(np.asarray(vectors, float), axis=1))


def kendall_tau_a(a, b) -> float:
    """Kendall's tau-a: (concordant - discordant) / (n (n - 1) / 2), ties counting as neither;
    the rank correlation Nili et al. 2014 recommend when a model RDM predicts ties. Computed in
    O(n log n) from scipy's tau-b, which divides the same numerator by
    sqrt((n0 - ties_a) (n0 - ties_b)) instead of n0."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    n0 = len(a) * (len(a) - 1) / 2
    ties_a, ties_b = _tied_pairs(a), _tied_pairs(b)
    if ties_a == n0 or ties_b == n0:
        return 0.0  # one vector constant: no pair is concordant or discordant
    tau_b = kendalltau(a, b, variant="b").statistic
    return float(tau_b * np.sqrt((n0 - ties_a) * (n0 - ties_b)) / n0)


def _tied_pairs(x: np.ndarray) -> float:
    _, counts = np.unique(x, return_counts=True)
    return float((counts * (counts - 1) / 2).sum())


def whitened_cosine(a, b) -> float:
    """Whitened cosine similarity of two RDM vectors (Diedrichsen et al. 2021, "Comparing
    representational geometries using whitened unbiased-distance-matrix similarity"), computed
    by rsatoolbox's `compare(..., "cosine_cov")` (its noise covariance of distance estimates)."""
    return float(whitened_cosine_matrix([a, b])[0, 1])


def whitened_cosine_matrix(vectors) -> np.ndarray:
    """The whitened cosine between every pair of RDM vectors, the covariance computed once."""
    try:
        from rsatoolbox.rdm import RDMs, compare
    except ImportError:
        raise FlatformerError(
            "the whitened cosine needs rsatoolbox: pip install 'flatformer[neuro]'"
        ) from None
    rdms = RDMs(np.asarray(vectors, float))
    return np.asarray(compare(rdms, rdms, "cosine_cov"), float)


def _centre(x) -> np.ndarray:
    x = _matrix(x)
    return x - x.mean(0)


def linear_cka(x, y) -> float:
    """Linear CKA = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F) on column-centred X, Y (stimuli x
    units) (Kornblith et al. 2019, "Similarity of Neural Network Representations Revisited",
    eq. 5). A representation with no variance has CKA 0 with everything."""
    x, y = _centre(x), _centre(y)
    num = np.linalg.norm(y.T @ x) ** 2
    den = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    return float(num / den) if den > 0 else 0.0


def _rbf_gram(x, fraction: float) -> np.ndarray:
    sq = (x * x).sum(1)
    d = np.maximum(sq[:, None] + sq[None] - 2 * x @ x.T, 0)
    median = np.median(np.sqrt(d[np.triu_indices(len(x), 1)]))
    sigma = fraction * median if median > 0 else 1.0
    return np.exp(-d / (2 * sigma * sigma))


def rbf_cka(x, y, fraction: float = 0.5) -> float:
    """RBF CKA = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)) with Gaussian kernels whose bandwidth
    sigma is `fraction` (0.5, as in Kornblith et al. 2019's experiments) of the median distance
    between stimuli, HSIC(K, L) = tr(K H L H) (Kornblith et al. 2019, eq. 3-4)."""
    x, y = _matrix(x), _matrix(y)
    n = len(x)
    h = np.eye(n) - 1.0 / n
    k = h @ _rbf_gram(x, fraction) @ h
    l_ = h @ _rbf_gram(y, fraction) @ h
    den = np.sqrt((k * k).sum() * (l_ * l_).sum())
    return float((k * l_).sum() / den) if den > 0 else 0.0


def procrustes_distance(x, y) -> float:
    """Angular Procrustes shape distance arccos(||X^T Y||_* / (||X||_F ||Y||_F)) after centring,
    the narrower zero-padded to the wider (Williams et al. 2021, "Generalized Shape Metrics on
    Neural Representations", eq. 5 with alpha = 1). A metric, in radians, 0 for rotated copies."""
    x, y = _centre(x), _centre(y)
    width = max(x.shape[1], y.shape[1])
    x = np.pad(x, ((0, 0), (0, width - x.shape[1])))
    y = np.pad(y, ((0, 0), (0, width - y.shape[1])))
    den = np.linalg.norm(x) * np.linalg.norm(y)
    if den == 0:
        return float(np.pi / 2)
    nuclear = np.linalg.svd(x.T @ y, compute_uv=False).sum()
    return float(np.arccos(np.clip(nuclear / den, -1.0, 1.0)))


# Every pair at once. A report compares hundreds of activations (every head of every hook), so
# the measures above, pair by pair on the units, grow with (activations x width)^2. Each is
# rewritten on the stimuli instead: a few numbers per activation, computed once, from which
# every pair's value is a dot product or a small SVD. The values are the same (tested equal).


def _unit(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v)
    return v / norm if norm > 0 else v


def _cka_feature(x, measure: str) -> np.ndarray:
    """The centred kernel H K H, flattened to unit norm: CKA = HSIC(K, L) / sqrt(HSIC(K, K)
    HSIC(L, L)) is then the dot product of two features (Kornblith et al. 2019, eq. 3-4).
    Linear: K = X X^T on the column-centred X (which is H K H), and tr(K L) = ||Y^T X||_F^2,
    eq. 5's numerator."""
    if measure == "cka":
        x = _centre(x)
        return _unit((x @ x.T).ravel())
    x = _matrix(x)
    h = np.eye(len(x)) - 1.0 / len(x)
    return _unit((h @ _rbf_gram(x, 0.5) @ h).ravel())


def _procrustes_feature(x) -> np.ndarray:
    """U S / ||X||_F of the centred X's thin SVD, without the directions it does not use (a
    singular value below 1e-12 of the largest): the nuclear norm of X^T Y is that of
    (U_x S_x)^T (U_y S_y), at most stimuli x stimuli whatever the widths. None for an X with
    no variance."""
    x = _centre(x)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    if not s.any():
        return None
    keep = s > 1e-12 * s[0]
    return u[:, keep] * (s[keep] / np.linalg.norm(s))


def _procrustes_matrix(xs: list, ys: list | None) -> np.ndarray:
    """procrustes_distance between every x and every y (ys None: xs, each pair once, the upper
    triangle filled), on their features: each x against the ys of one rank at a time, one
    batched SVD each."""
    fx = [_procrustes_feature(x) for x in xs]
    fy = fx if ys is None else [_procrustes_feature(y) for y in ys]
    m = np.full((len(fx), len(fy)), np.pi / 2)  # a representation with no variance
    ranks = {f.shape[1] for f in fy if f is not None}
    groups = [[k for k, f in enumerate(fy) if f is not None and f.shape[1] == r] for r in ranks]
    for a, f in enumerate(fx):
        if f is None:
            continue
        for group in groups:
            group = group if ys is not None else [k for k in group if k > a]
            if not group:
                continue
            stacked = np.stack([fy[k] for k in group])
            nuclear = np.linalg.svd(f.T @ stacked, compute_uv=False).sum(-1)
            m[a, group] = np.arccos(np.clip(nuclear, -1.0, 1.0))
    return m


def _symmetric(m: np.ndarray, diagonal: float) -> np.ndarray:
    """Each pair's two roundings made one, and every item exactly itself on the diagonal."""
    m = (m + m.T) / 2
    np.fill_diagonal(m, diagonal)
    return m


def similarity_matrix(xs: list, ys: list | None = None, measure: str = "cka") -> np.ndarray:
    """len(xs) x len(ys) (ys defaults to xs) of `measure` between every pair: "cka"
    (`linear_cka`), "cka-rbf" (`rbf_cka`), "procrustes" (`procrustes_distance`) on
    representations; "spearman" (`spearman`), "tau-a" (`kendall_tau_a`) or "cosine"
    (`whitened_cosine`) on RDM vectors."""
    same = ys is None
    ys = xs if same else ys
    if measure in ("cka", "cka-rbf"):
        fx = np.array([_cka_feature(x, measure) for x in xs])
        fy = fx if same else np.array([_cka_feature(y, measure) for y in ys])
        return _symmetric(fx @ fy.T, 1.0) if same else fx @ fy.T
    if measure == "procrustes":
        if not same:
            return _procrustes_matrix(xs, ys)
        upper = np.triu(_procrustes_matrix(xs, None), 1)
        return upper + upper.T
    if measure == "cosine":  # one rsatoolbox noise covariance for all the RDMs at once
        m = whitened_cosine_matrix(xs if same else [*xs, *ys])
        return m if same else m[: len(xs), len(xs) :]
    if measure == "spearman" and same:
        return spearman_matrix(xs)
    f = {"spearman": spearman, "tau-a": kendall_tau_a}[measure]
    if not same:
        return np.array([[f(x, y) for y in ys] for x in xs])
    m = np.eye(len(xs))
    for a in range(len(xs)):
        for b in range(a + 1, len(xs)):
            m[a, b] = m[b, a] = f(xs[a], xs[b])
    return m
