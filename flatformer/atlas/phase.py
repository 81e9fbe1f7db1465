"""The phase diagram's numbers: runs binned by one knob (x, default attn_coeff, in equal bins
over [0, 1] as Zhong et al.'s Figure 6 bins it) and optionally a second (y: its values when it
takes few, else equal bins), and in each cell the count and fraction of each mechanism and the
runs behind it. Computed here; drawn by figures/atlas.py and explorer/atlas_page.py."""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from .measure import MECHANISMS

MAX_LEVELS = 12  # a y knob with at most this many values is shown value by value


def _edges(values: np.ndarray, bins: int, lo=None, hi=None) -> np.ndarray:
    lo = float(values.min()) if lo is None else lo
    hi = float(values.max()) if hi is None else hi
    if hi <= lo:
        hi = lo + 1.0
    return np.linspace(lo, hi, bins + 1)


def _bin(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)


def _label(lo: float, hi: float) -> str:
    return f"{lo:.3g}-{hi:.3g}"


def phase_diagram(rows: list[dict], x: str = "attn_coeff", y: str | None = None, bins: int = 10):
    """The diagram of results.csv's `rows` (read_atlas): runs with a mechanism, binned.

    Returns {"x", "y", "x_labels", "y_labels", "kinds", "counts" (ny, nx, kinds), "total"
    (ny, nx), "fraction" (ny, nx, kinds; NaN where a cell is empty), "runs" (ny x nx lists of
    {"job", "seed", "mechanism", x, y}), "left_out" (runs without a mechanism)}."""
    if not 1 <= bins <= 100:
        raise FlatformerError(f"--bins must be in 1..100, got {bins}")
    kept = [r for r in rows if r.get("mechanism") in MECHANISMS]
    for key in (x, y):
        if key is not None and any(not isinstance(r.get(key), (int, float)) for r in kept):
            raise FlatformerError(f"the atlas's column {key!r} is not a number in every run")
    if not kept:
        raise FlatformerError("no run of the atlas has a mechanism measured (modular addition)")
    xs = np.array([float(r[x]) for r in kept])
    x_edges = _edges(xs, bins, 0.0, 1.0) if x == "attn_coeff" else _edges(xs, bins)
    x_index = _bin(xs, x_edges)
    x_labels = [_label(a, b) for a, b in zip(x_edges[:-1], x_edges[1:])]
    if y is None:
        y_index, y_labels = np.zeros(len(kept), int), ["all"]
    else:
        ys = np.array([float(r[y]) for r in kept])
        levels = np.unique(ys)
        if len(levels) <= MAX_LEVELS:
            y_index = np.searchsorted(levels, ys)
            y_labels = [f"{v:g}" for v in levels]
        else:
            y_edges = _edges(ys, bins)
            y_index = _bin(ys, y_edges)
            y_labels = [_label(a, b) for a, b in zip(y_edges[:-1], y_edges[1:])]
    counts = np.zeros((len(y_labels), bins, len(MECHANISMS)), int)
    runs: list[list[list[dict]]] = [[[] for _ in range(bins)] for _ in y_labels]
    for r, i, j in zip(kept, y_index, x_index):
        counts[i, j, MECHANISMS.index(r["mechanism"])] += 1
        runs[i][j].append(
            {k: r[k] for k in dict.fromkeys(["job", "seed", "mechanism", x] + ([y] if y else []))}
        )
    total = counts.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = np.where(total[..., None] > 0, counts / total[..., None], np.nan)
    return {
        "x": x,
        "y": y,
        "x_labels": x_labels,
        "y_labels": y_labels,
        "kinds": list(MECHANISMS),
        "counts": counts,
        "total": total,
        "fraction": fraction,
        "runs": runs,
        "left_out": len(rows) - len(kept),
    }
