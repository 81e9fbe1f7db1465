"""Shared look of every figure, movie and page: token colours, colour maps, sizes.

One colour per token everywhere: `token_colors(vocab, focus)` is the single source, so the
figures, the movies and the browser page agree. Colour maps are colour-blind safe and fetched
with `matplotlib.colormaps[name]` (matplotlib 3.9 removed `cm.get_cmap`).
"""

from __future__ import annotations

import numpy as np

# Okabe & Ito's palette then Paul Tol's "muted" scheme: chosen to stay distinguishable under
# the common colour-vision deficiencies; the pale yellows come last because they vanish on white.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#332288",
           "#999933", "#882255", "#44AA99", "#AA4499", "#117733", "#CC6677", "#DDCC77"]
FOCUS_COLOR = "#000000"   # the focus token (e.g. `+`) is black in every figure
MASKED_COLOR = "#BBBBBB"  # points hidden by the causal mask, unconstrained cells
CORRECT_COLOR = "#009E73"
WRONG_COLOR = "#D55E00"
QUERY_COLOR, KEY_COLOR, VALUE_COLOR = "#0072B2", "#D55E00", "#009E73"

SEQUENTIAL = "viridis"     # probabilities, entropy
DIVERGING = "RdBu_r"       # signed values: scores, weights, embeddings (centred on 0)
WEIGHTS = "cividis"        # attention patterns

COLUMN_WIDTH = 3.4         # inches: one A4 two-column-paper column
PAGE_WIDTH = 7.0           # inches: the full text width
DPI = 200


def token_colors(vocab: list[str], focus: str | None = None) -> list[str]:
    """A hex colour per token, in vocabulary order: the focus token black, the others from
    PALETTE in order; vocabularies larger than the palette take evenly spaced colours of the
    (colour-blind safe) viridis map instead, so every token still has its own colour."""
    others = [i for i, tok in enumerate(vocab) if tok != focus]
    if len(others) <= len(PALETTE):
        picked = PALETTE[:len(others)]
    else:
        from matplotlib import colormaps
        from matplotlib.colors import to_hex
        cmap = colormaps["viridis"]
        picked = [to_hex(cmap(x)) for x in np.linspace(0.0, 0.92, len(others))]
    colors = [FOCUS_COLOR] * len(vocab)
    for i, c in zip(others, picked):
        colors[i] = c
    return colors


SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def point_text(token: str, position: int) -> str:
    """How a combined point is written on a figure: the token with its position as a subscript
    ("+₅"), so token 10 at position 3 does not read as "103"."""
    return f"{token}{str(position).translate(SUBSCRIPTS)}"
