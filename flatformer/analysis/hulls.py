"""Exact geometry of small point clouds: how far apart two convex hulls are (linear separability
with its margin), and whether a sequence of points is ordered along its main axis.

Two finite point sets are linearly separable exactly when their convex hulls do not touch, and
half the distance between the hulls is the hard-margin SVM margin. That distance is the norm of
the minimum-norm point of the hull of the difference set {a - b}, found here with Wolfe's
algorithm (1976), which is exact for finite sets and needs no solver library.
"""

from __future__ import annotations

import numpy as np

TOL = 1e-12


def _affine_minimizer(Q: np.ndarray) -> np.ndarray:
    """Weights a (sum 1) minimising |Q^T a| over the affine hull of the rows of Q."""
    n = len(Q)
    kkt = np.zeros((n + 1, n + 1))
    kkt[:n, :n] = Q @ Q.T
    kkt[:n, n] = kkt[n, :n] = 1.0
    rhs = np.zeros(n + 1)
    rhs[n] = 1.0
    return np.linalg.lstsq(kkt, rhs, rcond=None)[0][:n]


def min_norm_point(points: np.ndarray, max_iter: int = 10_000) -> np.ndarray:
    """The point of the convex hull of `points` (n, d) closest to the origin (Wolfe's algorithm).

    Keeps a corral S of affinely independent points and weights on them; each major cycle adds
    the point most opposed to the current x, each minor cycle moves to the affine minimiser of S
    or, when that leaves the simplex, as far toward it as the weights stay >= 0, dropping points
    whose weight reaches 0.
    """
    P = np.asarray(points, dtype=float)
    norms = (P * P).sum(1)
    scale = max(float(norms.max()), 1e-300)
    S = [int(np.argmin(norms))]
    lam = np.array([1.0])
    x = P[S[0]].copy()
    for _ in range(max_iter):
        dots = P @ x
        j = int(np.argmin(dots))
        if x @ x - dots[j] <= TOL * scale or j in S:
            return x  # no point improves on x: optimal
        S.append(j)
        lam = np.append(lam, 0.0)
        for _ in range(len(S) + 1):
            alpha = _affine_minimizer(P[S])
            if np.all(alpha > TOL):
                lam = alpha
                break
            # Step from lam toward alpha until the first weight reaches zero, then drop it.
            falling = (alpha <= TOL) & (lam - alpha > 0)
            theta = np.min(lam[falling] / (lam[falling] - alpha[falling])) if falling.any() else 1
            lam = (1 - theta) * lam + theta * alpha
            keep = lam > TOL
            S = [s for s, k in zip(S, keep) if k]
            lam = lam[keep] / lam[keep].sum()
        x = lam @ P[S]
    return x


def hull_distance(A: np.ndarray, B: np.ndarray) -> float:
    """Distance between the convex hulls of point sets A (n, d) and B (m, d); 0 if they meet."""
    A, B = np.asarray(A, dtype=float), np.asarray(B, dtype=float)
    diff = (A[:, None, :] - B[None, :, :]).reshape(-1, A.shape[1])
    return float(np.linalg.norm(min_norm_point(diff)))


def spread(*clouds: np.ndarray) -> float:
    """Root-mean-square distance of all the points to their common centroid (a length scale)."""
    X = np.concatenate([np.asarray(c, dtype=float) for c in clouds])
    return float(np.sqrt(((X - X.mean(0)) ** 2).sum(1).mean()))


def separation(A: np.ndarray, B: np.ndarray) -> dict:
    """Whether A and B are linearly separable, and the gap between their hulls as a fraction of
    the clouds' spread (scale-free, so seeds and models compare; 0 when the hulls meet)."""
    scale = spread(A, B)
    gap = hull_distance(A, B) / scale if scale > 0 else 0.0
    return {"separable": bool(gap > 1e-9), "gap": gap}


def ladder(points: np.ndarray) -> dict:
    """How well a sequence of points (T, d), e.g. the position embeddings, forms a ladder.

    `rho`: Spearman rank correlation between index and position along the main (first
    principal) axis, sign-free; `monotone`: every step moves the same way along that axis;
    `steps_in_order`: how many of the T - 1 steps go the majority's way along the axis;
    `axis_share`: fraction of the variance the axis holds (1 = on a straight line);
    `along`: each point's coordinate on the axis.
    """
    X = np.asarray(points, dtype=float)
    X = X - X.mean(0)
    _, s, Vt = np.linalg.svd(X, full_matrices=False)
    along = X @ Vt[0]
    ranks = np.argsort(np.argsort(along)).astype(float)
    index = np.arange(len(X), dtype=float)
    rho = float(np.corrcoef(index, ranks)[0, 1]) if len(X) > 1 else 1.0
    steps = np.diff(along)
    total = float((s**2).sum())
    in_order = max(int((steps > 0).sum()), int((steps < 0).sum()))
    return {
        "rho": abs(rho),
        "monotone": in_order == len(steps),
        "steps_in_order": in_order,
        "axis_share": float(s[0] ** 2 / total) if total > 0 else 1.0,
        "along": along.tolist(),
    }
