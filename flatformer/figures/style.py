"""Shared look of every figure and movie: token colours, colour maps, sizes.

One colour per token: `token_colors(vocab, focus)` is the single source, so the figures and the
movies agree (the explorer page keeps its own palette, in `explorer/views.js`). Colour maps are
colour-blind safe and fetched with `matplotlib.colormaps[name]` (matplotlib 3.9 removed
`cm.get_cmap`).
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


# --------------------------------------------------------------------------- label placement
# Labels are placed only when the figure's layout is final: draw functions queue them with
# `queue_labels` and `finish(fig)` runs the layout once, then places every queued label.

def merged_text(keys: list[tuple[str, int]]) -> str:
    """One label for points that coincide on the page: "1,3,5₄" for several tokens at one
    position, "+₂₋₅" for one token at consecutive positions, "1,3₀₋₂" for every combination of
    tokens and positions."""
    tokens = list(dict.fromkeys(k[0] for k in keys))
    positions = sorted(set(k[1] for k in keys))
    if len(tokens) * len(positions) == len(set(keys)):
        if len(positions) > 2 and positions == list(range(positions[0], positions[-1] + 1)):
            span = f"{positions[0]}-{positions[-1]}"
        else:
            span = ",".join(map(str, positions))
        return ",".join(tokens) + span.translate(SUBSCRIPTS).replace("-", "₋")
    by_position: dict[int, list[str]] = {}
    for tok, pos in keys:
        by_position.setdefault(pos, []).append(tok)
    return " ".join(point_text(",".join(dict.fromkeys(t)), p) for p, t in
                    sorted(by_position.items()))


MIN_FONT = 5.0  # points: the smallest text of any figure, readable when a 7-inch figure prints


def queue_labels(ax, xy, keys, colors, fontsize: float = 6.0, merge_px: float = 3.0):
    """Label the points `xy` (N, 2, data coordinates) once the layout is known (see `finish`).

    `keys` are (token, position) pairs (position None for a plain label); `colors` one colour per
    point. Points closer than `merge_px` on the page share one label.
    """
    fig = ax.get_figure(root=True)
    if not hasattr(fig, "_flatformer_labels"):
        fig._flatformer_labels = []
    fig._flatformer_labels.append((ax, np.asarray(xy, dtype=float).reshape(-1, 2), list(keys),
                                   list(colors), max(fontsize, MIN_FONT), merge_px))


def finish(fig):
    """Lay the figure out once, place its queued labels without overprinting, then freeze the
    layout (saving would otherwise run the constrained layout again) and return the figure.

    A job whose labels cannot all find a free spot is placed again with points merged over a
    wider radius (fewer, counted labels), up to MERGE_TRIES times."""
    fig.draw_without_rendering()
    jobs = getattr(fig, "_flatformer_labels", [])
    if jobs:
        renderer = fig.canvas.get_renderer()
        placed = np.zeros((0, 4))          # every label box so far, in figure pixels
        for ax, xy, keys, colors, fontsize, merge_px in jobs:
            for attempt in range(MERGE_TRIES):
                arts, boxes, crowded = _place(renderer, ax, xy, keys, colors, fontsize,
                                              merge_px * 2 ** attempt, placed)
                if not crowded or attempt == MERGE_TRIES - 1:
                    break
                for art in arts:
                    art.remove()
            placed = np.vstack([placed, boxes])
        fig._flatformer_labels = []
    fig.set_layout_engine("none")
    return fig


MERGE_TRIES = 5        # merge radius doubles each time: 3, 6, 12, 24, 48 points
COUNTED = 4            # a label for more points than this names its tokens and counts them


def _groups(px: np.ndarray, radius: float) -> list[list[int]]:
    """Groups of points within `radius` pixels of their group's first point (leader
    clustering: unlike single linkage it never chains a whole line of points into one)."""
    dist = np.linalg.norm(px[:, None] - px[None], axis=-1)
    free = np.ones(len(px), dtype=bool)
    groups = []
    for i in range(len(px)):
        if free[i]:
            members = np.flatnonzero(free & (dist[i] < radius))
            free[members] = False
            groups.append(list(members))
    return groups


def _overlap(box, boxes):
    """Overlap areas between one box (x0, y0, x1, y1) and an array of boxes (M, 4)."""
    if not len(boxes):
        return np.zeros(0)
    w = np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0])
    h = np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1])
    return np.clip(w, 0, None) * np.clip(h, 0, None)


def _label_text(keys) -> str:
    """The text of one label for the points with these keys."""
    if any(k[1] is None for k in keys):
        return " ".join(dict.fromkeys(str(k[0]) for k in keys))
    if len(keys) == 1:
        return point_text(*keys[0])
    if len(keys) > COUNTED:        # a cluster: its tokens, and how many points it holds
        tokens = list(dict.fromkeys(k[0] for k in keys))
        shown = ",".join(tokens[:4]) + (",…" if len(tokens) > 4 else "")
        return f"{shown} ×{len(keys)}"
    return merged_text(keys)


def _place(renderer, ax, xy, keys, colors, fontsize, merge_px, placed):
    """Place one job's labels, never on another label; returns (the annotations, their boxes,
    whether some label found no free spot)."""
    from matplotlib import patheffects
    from matplotlib.font_manager import FontProperties
    fig = ax.get_figure(root=True)
    px_per_pt = fig.dpi / 72
    px = ax.transData.transform(np.where(np.isfinite(xy), xy, 0.0))
    frame = ax.get_window_extent(renderer)
    inside = np.all(np.isfinite(xy), axis=1) & (px[:, 0] >= frame.x0) & \
        (px[:, 0] <= frame.x1) & (px[:, 1] >= frame.y0) & (px[:, 1] <= frame.y1)
    idx = np.flatnonzero(inside)
    if not len(idx):
        return [], np.zeros((0, 4)), False
    groups = [[idx[i] for i in g] for g in _groups(px[idx], merge_px * px_per_pt)]
    # Hardest first would push easy labels away; isolated points go first and keep their spot.
    near = (np.linalg.norm(px[idx][:, None] - px[idx][None], axis=-1) < 25 * px_per_pt).sum(1)
    crowd = dict(zip(idx, near))
    groups.sort(key=lambda g: max(crowd[i] for i in g))
    mark = 2.0 * px_per_pt                            # half a marker, in pixels
    points = np.column_stack([px[idx] - mark, px[idx] + mark])
    labels = np.asarray(placed, dtype=float).reshape(-1, 4)
    font = FontProperties(size=fontsize)
    step = 2.0 * px_per_pt
    angles = np.deg2rad([0, 90, 180, 270, 45, 135, 225, 315, 22, 158, 202, 338, 68, 112, 248,
                         292])
    outline = [patheffects.withStroke(linewidth=1.5, foreground="white")]
    arts, boxes, crowded = [], [], False
    for g in groups:
        anchor = px[g].mean(0)
        text = _label_text([keys[i] for i in g])
        w, h, _ = renderer.get_text_width_height_descent(text, font, ismath=False)
        w, h = w + 4, h + 4   # the outline and the glyphs' ink reach past the metrics
        best, best_cost = None, np.inf
        for ring in range(1, 31):
            r = ring * step
            cx = anchor[0] + np.cos(angles) * (r + w / 2)
            cy = anchor[1] + np.sin(angles) * (r + h / 2)
            for a in range(len(angles)):
                box = np.array([cx[a] - w / 2, cy[a] - h / 2, cx[a] + w / 2, cy[a] + h / 2])
                out = max(frame.x0 - box[0], box[2] - frame.x1, frame.y0 - box[1],
                          box[3] - frame.y1, 0.0)
                # Labels never cover labels (text must stay legible); covering a point or
                # leaving the frame only costs.
                if _overlap(box, labels).sum() > 0:
                    continue
                cost = _overlap(box, points).sum() + 20 * out * h
                if cost == 0:
                    best, best_cost = (box, ring), 0
                    break
                cost += ring * w * h * 0.15           # prefer a little overlap to a far label
                if cost < best_cost:
                    best, best_cost = (box, ring), cost
            if best_cost == 0:
                break
        if best is None:   # no free spot within 30 rings: on top, and try bigger clusters
            crowded = True
            best = (np.array([anchor[0] - w / 2, anchor[1] - h / 2, anchor[0] + w / 2,
                              anchor[1] + h / 2]), 1)
        box, ring = best
        offset = ((box[0] + box[2]) / 2 - anchor[0], (box[1] + box[3]) / 2 - anchor[1])
        color = colors[g[0]] if len({colors[i] for i in g}) == 1 else "#333333"
        # A label pushed away from its point gets a thin leader line back to it.
        arrow = dict(arrowstyle="-", color="#888888", lw=0.4, shrinkA=0, shrinkB=1) \
            if ring > 2 else None
        art = ax.annotate(text, xy=ax.transData.inverted().transform(anchor),
                          xytext=(offset[0] / px_per_pt, offset[1] / px_per_pt),
                          textcoords="offset points", ha="center", va="center",
                          fontsize=fontsize, color=color, path_effects=outline,
                          arrowprops=arrow, annotation_clip=False, zorder=5)
        art.set_in_layout(False)
        arts.append(art)
        boxes.append(box)
        labels = np.vstack([labels, box[None]])
    return arts, np.array(boxes).reshape(-1, 4), crowded
