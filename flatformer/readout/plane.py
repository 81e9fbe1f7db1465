"""How a d-dim space is drawn in 2-D: the identity when d == 2 (the paper's point: no projection
needed), else the first two principal components of the points shown; square limits and grids
over a plane."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Plane:
    """An affine map from a d-dim space to 2-D drawing coordinates: p = (x - mean) @ axes.T.

    For d == 2 it is the identity and `explained` is None. For d > 2 `axes` are the first two
    principal directions of the fitted points and `explained` their share of the variance. A
    1-dim space is drawn on the x axis.
    """

    mean: np.ndarray  # (d,)
    axes: np.ndarray  # (2, d), orthonormal rows (the 2nd is zero when d == 1)
    explained: np.ndarray | None = None  # (2,) fraction of variance along each axis

    @property
    def is_identity(self) -> bool:
        """True when the space is already the plane (d <= 2): no projection."""
        return self.explained is None

    def project(self, x: np.ndarray) -> np.ndarray:
        """(..., d) -> (..., 2)."""
        return (np.asarray(x) - self.mean) @ self.axes.T

    def lift(self, p: np.ndarray) -> np.ndarray:
        """(..., 2) drawing coordinates -> (..., d) points of the space, on the plane."""
        return self.mean + np.asarray(p) @ self.axes

    def axis_labels(self, space: str = "") -> tuple[str, str]:
        """E.g. ("dim 1", "dim 2") for the plane itself, ("PC1 (71%)", "PC2 (18%)") for PCA."""
        prefix = f"{space} " if space else ""
        if self.explained is None:
            if not np.any(self.axes[1]):
                return f"{prefix}dim 1", ""
            return f"{prefix}dim 1", f"{prefix}dim 2"
        return tuple(f"{prefix}PC{i + 1} ({100 * v:.0f}%)" for i, v in enumerate(self.explained))


def fit_plane(points: np.ndarray) -> Plane:
    """The plane to draw `points` (..., d) in: identity for d <= 2, else PCA of the points.

    Principal axes get a deterministic sign (largest-magnitude entry positive) so that planes fitted
    to nearby checkpoints do not flip between movie frames.
    """
    x = np.asarray(points, dtype=np.float64)
    d = x.shape[-1]
    if d == 1:
        return Plane(np.zeros(1), np.array([[1.0], [0.0]]))
    if d == 2:
        return Plane(np.zeros(2), np.eye(2))
    x = x.reshape(-1, d)
    mean = x.mean(0)
    _, s, vt = np.linalg.svd(x - mean, full_matrices=False)
    axes = vt[:2].copy()
    signs = np.sign(axes[np.arange(2), np.abs(axes).argmax(1)])
    axes *= np.where(signs == 0, 1.0, signs)[:, None]
    var = s**2
    explained = var[:2] / var.sum() if var.sum() > 0 else np.zeros(2)
    return Plane(mean, axes, explained)


def square_limits(*arrays: np.ndarray, pad: float = 0.08) -> tuple[float, float, float, float]:
    """(x0, x1, y0, y1) covering every 2-D point of `arrays` (each (..., 2)), with equal spans so
    panels drawn with these limits can be compared and keep an aspect ratio of 1."""
    pts = np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1, 2) for a in arrays])
    pts = pts[np.all(np.isfinite(pts), axis=1)]
    if not len(pts):
        return (-1.0, 1.0, -1.0, 1.0)
    lo, hi = pts.min(0), pts.max(0)
    centre, half = (lo + hi) / 2, max((hi - lo).max() / 2, 1e-6) * (1 + pad)
    return (centre[0] - half, centre[0] + half, centre[1] - half, centre[1] + half)


def fitted_limits(*arrays: np.ndarray, pad: float = 0.08, max_ratio: float = 2.0):
    """(x0, x1, y0, y1) fitted to the points of `arrays`: each axis spans its own points, and
    the shorter span grows only as far as needed to keep the two spans within `max_ratio` of
    each other (a panel drawn at equal aspect stays at most that elongated)."""
    x0, x1, y0, y1 = square_limits(*arrays, pad=pad)
    pts = np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1, 2) for a in arrays])
    pts = pts[np.all(np.isfinite(pts), axis=1)]
    if not len(pts):
        return x0, x1, y0, y1
    lo, hi = pts.min(0), pts.max(0)
    centre, half = (lo + hi) / 2, np.maximum((hi - lo) / 2, 1e-6) * (1 + pad)
    half = np.maximum(half, half.max() / max_ratio)
    return (centre[0] - half[0], centre[0] + half[0], centre[1] - half[1], centre[1] + half[1])


def grid(limits, resolution: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """xs (G,), ys (G,) and points (G, G, 2) with points[i, j] = (xs[j], ys[i]) (image order)."""
    xs = np.linspace(limits[0], limits[1], resolution)
    ys = np.linspace(limits[2], limits[3], resolution)
    gx, gy = np.meshgrid(xs, ys)
    return xs, ys, np.stack([gx, gy], -1)


@dataclass
class Field:
    """A scalar over a plane grid: values[i, j] at (xs[j], ys[i])."""

    xs: np.ndarray
    ys: np.ndarray
    values: np.ndarray

    @property
    def extent(self) -> tuple[float, float, float, float]:
        return (self.xs[0], self.xs[-1], self.ys[0], self.ys[-1])
