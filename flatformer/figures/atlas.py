"""The atlas's phase diagram: in each cell (a bin of attn_coeff, and of a second knob when one
is given) the fraction of runs that learned each mechanism, one panel per mechanism. The
numbers come from `atlas.phase.phase_diagram`; this only draws them."""

from __future__ import annotations

import numpy as np

from . import style

KIND_COLORMAPS = {"clock": "Blues", "pizza": "Oranges", "other": "Greys"}
NAMES = {"attn_coeff": "attn_coeff (0: uniform attention, 1: learned)"}


def draw_mechanism_fraction(diagram: dict, kind: str, ax=None):
    """One mechanism's fraction per cell as a heatmap, each cell labelled with its fraction
    and its number of runs; empty cells blank. Returns the Figure."""
    import matplotlib
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 2 + 0.5 * len(diagram["y_labels"])))
    k = diagram["kinds"].index(kind)
    share = diagram["fraction"][..., k]
    cmap = matplotlib.colormaps[KIND_COLORMAPS.get(kind, style.SEQUENTIAL)].with_extremes(
        bad="white"
    )
    image = ax.imshow(
        np.ma.masked_invalid(share), cmap=cmap, vmin=0, vmax=1, aspect="auto", origin="lower"
    )
    total = diagram["total"]
    for i in range(share.shape[0]):
        for j in range(share.shape[1]):
            if total[i, j]:
                ax.text(
                    j,
                    i,
                    f"{share[i, j]:.0%}\nn={total[i, j]}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if share[i, j] > 0.6 else "black",
                )
    ax.set_xticks(range(len(diagram["x_labels"])), diagram["x_labels"], rotation=45, ha="right")
    ax.set_yticks(range(len(diagram["y_labels"])), diagram["y_labels"])
    ax.set_xlabel(NAMES.get(diagram["x"], diagram["x"]))
    ax.set_ylabel(diagram["y"] or "")
    ax.set_title(f"fraction {kind}")
    ax.figure.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    return ax.figure


def draw_phase_diagram(diagram: dict, axes=None):
    """Every mechanism's panel, stacked (`axes`: one per mechanism, or None for a new
    figure). Returns the Figure."""
    import matplotlib.pyplot as plt

    kinds = diagram["kinds"]
    if axes is None:
        height = 1.6 + 0.45 * len(diagram["y_labels"])
        fig, axes = plt.subplots(len(kinds), 1, figsize=(8, height * len(kinds)))
    for kind, ax in zip(kinds, np.atleast_1d(axes)):
        draw_mechanism_fraction(diagram, kind, ax)
    fig = np.atleast_1d(axes)[0].figure
    runs = int(diagram["total"].sum())
    fig.suptitle(f"Which mechanism each run learned ({runs} runs)")
    fig.tight_layout()
    return fig
