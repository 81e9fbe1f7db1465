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
PALETTE = [
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#332288",
    "#999933",
    "#882255",
    "#44AA99",
    "#AA4499",
    "#117733",
    "#CC6677",
    "#DDCC77",
]
FOCUS_COLOR = "#000000"  # the focus token (e.g. `+`) is black in every figure
MASKED_COLOR = "#BBBBBB"  # points hidden by the causal mask, unconstrained cells
OTHER_COLOR = "#999999"  # tokens a large vocabulary's figures do not single out
CORRECT_COLOR = "#009E73"
WRONG_COLOR = "#D55E00"
QUERY_COLOR, KEY_COLOR, VALUE_COLOR = "#0072B2", "#D55E00", "#009E73"

SEQUENTIAL = "viridis"  # probabilities, entropy
DIVERGING = "RdBu_r"  # signed values: scores, weights, embeddings (centred on 0)
WEIGHTS = "cividis"  # attention patterns

COLUMN_WIDTH = 3.4  # inches: one A4 two-column-paper column
PAGE_WIDTH = 7.0  # inches: the full text width
DPI = 200


def token_colors(vocab: list[str], focus: str | None = None) -> list[str]:
    """A hex colour per token, in vocabulary order: the focus token black, the others from
    PALETTE in order; vocabularies larger than the palette take evenly spaced colours of the
    (colour-blind safe) viridis map instead, so every token still has its own colour."""
    others = [i for i, tok in enumerate(vocab) if tok != focus]
    if len(others) <= len(PALETTE):
        picked = PALETTE[: len(others)]
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
    return " ".join(
        point_text(",".join(dict.fromkeys(t)), p) for p, t in sorted(by_position.items())
    )


MIN_FONT = 5.0  # points: the smallest text of any figure, readable when a 7-inch figure prints


def queue_labels(ax, xy, keys, colors, fontsize: float = 6.0, merge_px: float = 3.0):
    """Label the points `xy` (N, 2, data coordinates) once the layout is known (see `finish`).

    `keys` are (token, position) pairs (position None for a plain label); `colors` one colour per
    point. Points closer than `merge_px` on the page share one label.
    """
    fig = ax.get_figure(root=True)
    if not hasattr(fig, "_flatformer_labels"):
        fig._flatformer_labels = []
    fig._flatformer_labels.append(
        (
            ax,
            np.asarray(xy, dtype=float).reshape(-1, 2),
            list(keys),
            list(colors),
            max(fontsize, MIN_FONT),
            merge_px,
        )
    )


def queue_zone_label(ax, text: str, spots, land, token: int, keep_clear=None):
    """Name the argmax zone of `token` in `land` once the layout is known (see `finish`), at
    the first of `spots` (data coordinates, best first) free of markers, labels and the
    segments `keep_clear` ((N, 2, 2) data coordinates, e.g. arrows drawn over the zones)."""
    fig = ax.get_figure(root=True)
    if not hasattr(fig, "_flatformer_zones"):
        fig._flatformer_zones = []
    segments = np.zeros((0, 2, 2)) if keep_clear is None else np.asarray(keep_clear, float)
    fig._flatformer_zones.append((ax, text, np.asarray(spots, dtype=float), land, token, segments))


def finish(fig):
    """Lay the figure out once, place its queued labels without overprinting, then freeze the
    layout (saving would otherwise run the constrained layout again) and return the figure.

    Zone names go first (each must stay in its zone, the point labels can move anywhere). A
    job whose labels cannot all find a free spot is placed again with points merged over a
    wider radius (fewer, counted labels), up to MERGE_TRIES times."""
    fig.draw_without_rendering()
    zones = getattr(fig, "_flatformer_zones", [])
    jobs = getattr(fig, "_flatformer_labels", [])
    if zones or jobs:
        renderer = fig.canvas.get_renderer()
        # Every label box so far, in figure pixels; the legends' boxes first, so that no label
        # lands on one.
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        placed = np.array([leg.get_window_extent(renderer).extents for leg in legends])
        placed = placed.reshape(-1, 4)
        for ax, text, spots, land, token, segments in zones:
            box = _place_zone(renderer, ax, text, spots, land, token, segments, placed)
            placed = np.vstack([placed, box])
        for ax, xy, keys, colors, fontsize, merge_px in jobs:
            for attempt in range(MERGE_TRIES):
                arts, boxes, crowded = _place(
                    renderer, ax, xy, keys, colors, fontsize, merge_px * 2**attempt, placed
                )
                if not crowded or attempt == MERGE_TRIES - 1:
                    break
                for art in arts:
                    art.remove()
            placed = np.vstack([placed, boxes])
        fig._flatformer_zones = []
        fig._flatformer_labels = []
    fig.set_layout_engine("none")
    return fig


MERGE_TRIES = 5  # merge radius doubles each time: 3, 6, 12, 24, 48 points
COUNTED = 4  # a label for more points than this names its tokens and counts them


def _groups(px: np.ndarray, radius: float) -> list[list[int]]:
    """Groups of points within `radius` pixels of their group's first point (leader
    clustering: unlike single linkage it never chains a whole line of points into one). A k-d
    tree finds the neighbours: memory grows with the points, not with their pairs."""
    from scipy.spatial import cKDTree

    tree = cKDTree(px)
    free = np.ones(len(px), dtype=bool)
    groups = []
    for i in range(len(px)):
        if free[i]:
            near = np.array(tree.query_ball_point(px[i], _below(radius)), dtype=int)
            members = np.sort(near[free[near]])
            free[members] = False
            groups.append(list(members))
    return groups


def _below(radius: float) -> float:
    """The largest float under `radius`: a k-d tree's ball includes its edge, the groups and
    crowd counts exclude it."""
    return float(np.nextafter(radius, 0.0))


def _crowd(px: np.ndarray, radius: float) -> np.ndarray:
    """How many points (itself included) lie within `radius` of each point."""
    from scipy.spatial import cKDTree

    return cKDTree(px).query_ball_point(px, _below(radius), return_length=True)


def marker_boxes(ax) -> np.ndarray:
    """The box (x0, y0, x1, y1, figure pixels) of every scatter and line marker `ax` draws."""
    px_per_pt = ax.get_figure(root=True).dpi / 72
    found = []
    for c in ax.collections:
        if type(c).__name__ == "PathCollection" and c.get_visible() and len(c.get_sizes()):
            xy = c.get_offset_transform().transform(c.get_offsets())
            found += [
                (p, np.sqrt(s) / 2 * px_per_pt)
                for p, s in zip(xy, np.resize(c.get_sizes(), len(xy)))
            ]
    for line in ax.lines:
        if line.get_visible() and line.get_marker() not in (None, "None", "", " "):
            xy = line.get_transform().transform(line.get_xydata())
            found += [(p, line.get_markersize() / 2 * px_per_pt) for p in xy]
    boxes = [
        (x - r, y - r, x + r, y + r) for (x, y), r in found if np.isfinite([x, y]).all() and r > 0
    ]
    return np.array(boxes, dtype=float).reshape(-1, 4)


def _overlap(box, boxes):
    """Overlap areas between one box (x0, y0, x1, y1) and an array of boxes (M, 4)."""
    if not len(boxes):
        return np.zeros(0)
    w = np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0])
    h = np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1])
    return np.clip(w, 0, None) * np.clip(h, 0, None)


def _label_text(keys) -> str:
    """The text of one label for the points with these keys."""
    if any(k[1] is None for k in keys):  # plain labels: "q 1,3,5 k 2", one prefix once
        by_prefix: dict[str, list[str]] = {}
        for name in dict.fromkeys(str(k[0]) for k in keys):
            prefix, _, rest = name.rpartition(" ")
            by_prefix.setdefault(prefix, []).append(rest)
        return " ".join(f"{p} {','.join(r)}".strip() for p, r in by_prefix.items())
    if len(keys) == 1:
        return point_text(*keys[0])
    if len(keys) > COUNTED:  # a cluster: its tokens, and how many points it holds
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
    inside = (
        np.all(np.isfinite(xy), axis=1)
        & (px[:, 0] >= frame.x0)
        & (px[:, 0] <= frame.x1)
        & (px[:, 1] >= frame.y0)
        & (px[:, 1] <= frame.y1)
    )
    idx = np.flatnonzero(inside)
    if not len(idx):
        return [], np.zeros((0, 4)), False
    groups = [[idx[i] for i in g] for g in _groups(px[idx], merge_px * px_per_pt)]
    # Hardest first would push easy labels away; isolated points go first and keep their spot.
    crowd = dict(zip(idx, _crowd(px[idx], 25 * px_per_pt)))
    groups.sort(key=lambda g: max(crowd[i] for i in g))
    own = np.column_stack([px[idx] - 1.0, px[idx] + 1.0])
    # Every marker the axes draw, in pixels, with a pixel and a half to spare (a glyph's ink
    # and the metrics' box differ by about that).
    markers = np.vstack([marker_boxes(ax), own]) + np.array([-1.5, -1.5, 1.5, 1.5])
    labels = np.asarray(placed, dtype=float).reshape(-1, 4)
    font = FontProperties(size=fontsize)
    step = 2.0 * px_per_pt
    angles = np.deg2rad([0, 90, 180, 270, 45, 135, 225, 315, 22, 158, 202, 338, 68, 112, 248, 292])
    outline = [patheffects.withStroke(linewidth=1.5, foreground="white")]
    arts, boxes, crowded = [], [], False
    for g in groups:
        anchor = px[g].mean(0)
        text = _label_text([keys[i] for i in g])
        w, h, _ = renderer.get_text_width_height_descent(text, font, ismath=False)
        w, h = w + 4, h + 4  # the outline and the glyphs' ink reach past the metrics
        best, fallback, fallback_cost = None, None, np.inf
        for ring in range(1, 41):
            r = ring * step
            cx = anchor[0] + np.cos(angles) * (r + w / 2)
            cy = anchor[1] + np.sin(angles) * (r + h / 2)
            for a in range(len(angles)):
                box = np.array([cx[a] - w / 2, cy[a] - h / 2, cx[a] + w / 2, cy[a] + h / 2])
                out = max(
                    frame.x0 - box[0], box[2] - frame.x1, frame.y0 - box[1], box[3] - frame.y1, 0.0
                )
                # Labels never cover labels, markers, or leave the frame (a reader must see
                # every point and read every label); the nearest such spot wins.
                if _overlap(box, labels).sum() > 0:
                    continue
                covered = _overlap(box, markers).sum()
                if covered == 0 and out == 0:
                    best = (box, ring)
                    break
                cost = covered + 20 * out * h + ring * w * h * 0.15
                if cost < fallback_cost:
                    fallback, fallback_cost = (box, ring), cost
            if best is not None:
                break
        if best is None:  # no free spot within 40 rings: the least bad, and try bigger clusters
            crowded = True
            best = fallback or (
                np.array(
                    [anchor[0] - w / 2, anchor[1] - h / 2, anchor[0] + w / 2, anchor[1] + h / 2]
                ),
                1,
            )
        box, ring = best
        offset = ((box[0] + box[2]) / 2 - anchor[0], (box[1] + box[3]) / 2 - anchor[1])
        color = colors[g[0]] if len({colors[i] for i in g}) == 1 else "#333333"
        # A label pushed away from its point gets a thin leader line back to it.
        arrow = (
            dict(arrowstyle="-", color="#888888", lw=0.4, shrinkA=0, shrinkB=1)
            if ring > 2
            else None
        )
        art = ax.annotate(
            text,
            xy=ax.transData.inverted().transform(anchor),
            xytext=(offset[0] / px_per_pt, offset[1] / px_per_pt),
            textcoords="offset points",
            ha="center",
            va="center",
            fontsize=fontsize,
            color=color,
            path_effects=outline,
            arrowprops=arrow,
            annotation_clip=False,
            zorder=5,
        )
        art.set_in_layout(False)
        arts.append(art)
        boxes.append(box)
        labels = np.vstack([labels, box[None]])
    return arts, np.array(boxes).reshape(-1, 4), crowded


ZONE_FONT = 6.5  # points, bold: a zone's name


def _in_zone(ax, land, token: int, px: np.ndarray) -> np.ndarray:
    """Whether each pixel point (..., 2) lies on a cell of `token`'s zone."""
    x, y = np.moveaxis(ax.transData.inverted().transform(px.reshape(-1, 2)), -1, 0)
    j = np.clip(
        np.rint((x - land.xs[0]) / (land.xs[-1] - land.xs[0]) * (len(land.xs) - 1)),
        0,
        len(land.xs) - 1,
    )
    i = np.clip(
        np.rint((y - land.ys[0]) / (land.ys[-1] - land.ys[0]) * (len(land.ys) - 1)),
        0,
        len(land.ys) - 1,
    )
    return (land.argmax[i.astype(int), j.astype(int)] == token).reshape(px.shape[:-1])


def _occupied(frame, boxes: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """The summed-area table of the frame's pixels that `boxes` (M, 4) and the pixel segments
    (N, 2, 2) cover, so that any box's count of covered pixels is four look-ups."""
    x0, y0 = np.floor(frame.x0), np.floor(frame.y0)
    W, H = int(np.ceil(frame.x1 - x0)) + 1, int(np.ceil(frame.y1 - y0)) + 1
    grid = np.zeros((H, W), dtype=np.int32)
    for bx0, by0, bx1, by1 in boxes:
        i0, i1 = np.clip([np.floor(by0 - y0), np.ceil(by1 - y0)], 0, H).astype(int)
        j0, j1 = np.clip([np.floor(bx0 - x0), np.ceil(bx1 - x0)], 0, W).astype(int)
        grid[i0:i1, j0:j1] = 1
    for start, end in segments:
        n = int(np.ceil(np.linalg.norm(end - start))) + 2  # a sample every pixel or closer
        pts = start + np.linspace(0, 1, n)[:, None] * (end - start)
        for di in (-1, 0, 1):  # a line about three pixels wide: the arrow and its antialiasing
            for dj in (-1, 0, 1):
                i = np.rint(pts[:, 1] - y0).astype(int) + di
                j = np.rint(pts[:, 0] - x0).astype(int) + dj
                keep = (i >= 0) & (i < H) & (j >= 0) & (j < W)
                grid[i[keep], j[keep]] = 1
    table = np.zeros((H + 1, W + 1), dtype=np.int64)
    table[1:, 1:] = grid.cumsum(0).cumsum(1)
    return table


def _place_zone(renderer, ax, text, spots, land, token, segments, placed) -> np.ndarray:
    """Write one zone's name at the first spot whose box covers no marker, no label and none of
    the segments and stays in the frame, wholly inside the zone if any such spot is (else
    centred in it); with no such spot, beside the deepest one with a leader line, as a point
    label. Returns the label's box (1, 4)."""
    from matplotlib import patheffects
    from matplotlib.font_manager import FontProperties

    frame = ax.get_window_extent(renderer)
    font = FontProperties(size=ZONE_FONT, weight="bold")
    w, h, _ = renderer.get_text_width_height_descent(text, font, ismath=False)
    w, h = w + 4, h + 4  # the outline and the glyphs' ink reach past the metrics
    px = ax.transData.transform(spots)
    boxes = np.column_stack([px - [w / 2, h / 2], px + [w / 2, h / 2]])
    covered = np.vstack(
        [marker_boxes(ax) + np.array([-1.5, -1.5, 1.5, 1.5]), np.reshape(placed, (-1, 4))]
    )
    ends = ax.transData.transform(segments.reshape(-1, 2)).reshape(-1, 2, 2)
    table = _occupied(frame, covered, ends[np.isfinite(ends).all((1, 2))])
    in_frame = (
        (boxes[:, 0] >= frame.x0)
        & (boxes[:, 1] >= frame.y0)
        & (boxes[:, 2] <= frame.x1)
        & (boxes[:, 3] <= frame.y1)
    )
    x0, y0 = np.floor(frame.x0), np.floor(frame.y0)
    j0, j1 = (np.floor(boxes[:, [0, 2]] - x0).astype(int).clip(0, table.shape[1] - 1)).T
    i0, i1 = (np.floor(boxes[:, [1, 3]] - y0).astype(int).clip(0, table.shape[0] - 1)).T
    j1, i1 = j1 + 1, i1 + 1  # the box's last pixel row and column count too
    j1, i1 = j1.clip(0, table.shape[1] - 1), i1.clip(0, table.shape[0] - 1)
    count = table[i1, j1] - table[i0, j1] - table[i1, j0] + table[i0, j0]
    free = in_frame & (count == 0)
    # The box's corners, edge midpoints and centre, for each spot: all in the zone, or not.
    fx, fy = np.meshgrid([-0.5, 0.0, 0.5], [-0.5, 0.0, 0.5])
    probes = px[:, None, :] + np.stack([fx.ravel() * w, fy.ravel() * h], -1)[None]
    inside = _in_zone(ax, land, token, probes).all(1)
    for candidates in (free & inside, free):
        if candidates.any():
            k = int(np.argmax(candidates))
            ax.text(
                *spots[k],
                text,
                ha="center",
                va="center",
                fontsize=ZONE_FONT,
                fontweight="bold",
                color="black",
                path_effects=[patheffects.withStroke(linewidth=1.4, foreground="white")],
                zorder=2,
            )
            return boxes[k : k + 1]
    _, box, _ = _place(renderer, ax, spots[:1], [(text, None)], ["black"], ZONE_FONT, 1.0, placed)
    return box
