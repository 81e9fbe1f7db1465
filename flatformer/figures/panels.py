"""Drawing helpers shared by the figure modules: figures, heatmaps, point clouds, backgrounds.

Figures are `matplotlib.figure.Figure` objects with an Agg canvas, never pyplot: nothing global
is touched, and a figure is freed when dropped. Draw functions run inside `styled`, which sets
the house fonts (sized to stay readable when a 7-inch figure is printed across an A4 page).
"""

from __future__ import annotations

import functools

import matplotlib
import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap, TwoSlopeNorm
from matplotlib.figure import Figure

from . import style

RC = {
    "font.size": 7,
    "axes.titlesize": 7.5,
    "axes.labelsize": 6.5,
    "xtick.labelsize": 6,
    "ytick.labelsize": 6,
    "legend.fontsize": 6,
    "figure.titlesize": 9,
    "axes.linewidth": 0.6,
    "xtick.major.width": 0.5,
    "ytick.major.width": 0.5,
    "xtick.major.size": 2,
    "ytick.major.size": 2,
    "lines.linewidth": 1.0,
    "savefig.dpi": style.DPI,
    "figure.constrained_layout.h_pad": 0.03,
    "figure.constrained_layout.w_pad": 0.03,
    "image.interpolation": "nearest",
    "svg.fonttype": "none",
    "pdf.fonttype": 42,
}


def styled(draw):
    """Run a draw function under the house rc settings, then place its queued labels."""

    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(RC):
            return style.finish(draw(*args, **kwargs))

    return wrapper


def new_figure(width: float, height: float, fig: Figure | None = None) -> Figure:
    """A constrained-layout figure (or `fig`, when the caller supplies one to draw into)."""
    if fig is None:
        fig = Figure(figsize=(width, height), dpi=style.DPI, layout="constrained")
        FigureCanvasAgg(fig)
    return fig


def cmap(name: str, bad: str = style.MASKED_COLOR):
    """A colour map by name (matplotlib.colormaps, never the removed cm.get_cmap), with NaN
    cells (masked keys, missing values) drawn in the masked gray."""
    return colormaps[name].with_extremes(bad=bad)


def symmetric(values, floor: float = 1e-9) -> float:
    """Largest |finite value|: the half-range of a diverging scale centred on 0."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return max(float(np.abs(v).max()) if v.size else 1.0, floor)


MAX_TICKS = 64  # labels an axis of a heatmap carries: every row of a larger one is unreadable


def labelled(n: int) -> list[int]:
    """Which of n rows (or columns) get a label: all up to MAX_TICKS, else every k-th."""
    return list(range(0, n, max(1, -(-n // MAX_TICKS))))


def heatmap(
    ax,
    matrix,
    rows=None,
    cols=None,
    cmap_name=style.DIVERGING,
    vmin=None,
    vmax=None,
    annotate: bool | None = None,
    fmt="{:.2f}",
    title=None,
    fontsize=5.0,
):
    """A matrix as coloured cells (NaN in gray), optionally with each value written in its cell.

    Diverging maps are centred on zero with a symmetric range unless vmin/vmax are given.
    Values are annotated by default when the matrix is small enough to read (<= 12 x 12), in
    no less than style.MIN_FONT.
    """
    fontsize = max(fontsize, style.MIN_FONT)
    m = np.asarray(matrix, dtype=float)
    if cmap_name == style.DIVERGING and vmin is None and vmax is None:
        vmax = symmetric(m)
        vmin = -vmax
    image = ax.imshow(m, cmap=cmap(cmap_name), vmin=vmin, vmax=vmax, aspect="auto")
    if rows is not None:
        at = labelled(len(rows))
        ax.set_yticks(at, [rows[i] for i in at])
    if cols is not None:
        at = labelled(len(cols))
        ax.set_xticks(at, [cols[i] for i in at])
    ax.tick_params(length=0)
    if annotate is None:
        annotate = m.shape[0] <= 12 and m.shape[1] <= 12
    if annotate:
        norm = image.norm
        for (i, j), value in np.ndenumerate(m):
            if np.isfinite(value):
                dark = (
                    abs(norm(value) - 0.5) > 0.3
                    if cmap_name == style.DIVERGING
                    else norm(value) < 0.55
                )
                ax.text(
                    j,
                    i,
                    fmt.format(value),
                    ha="center",
                    va="center",
                    fontsize=fontsize,
                    color="white" if dark else "black",
                )
    if title:
        ax.set_title(title)
    return image


def colorbar(fig, image, ax, label: str = "", **kwargs):
    bar = fig.colorbar(
        image,
        ax=ax,
        shrink=kwargs.pop("shrink", 0.85),
        aspect=25,
        pad=kwargs.pop("pad", 0.02),
        **kwargs,
    )
    bar.ax.tick_params(labelsize=5.5, length=1.5)
    bar.outline.set_linewidth(0.4)
    if label:
        bar.set_label(label, fontsize=6)
    return bar


def plane_axes(ax, limits, plane=None, space: str = "", ticks: bool = True):
    """Square limits, equal aspect and the plane's axis labels (PCs with explained variance)."""
    ax.set_xlim(limits[0], limits[1])
    ax.set_ylim(limits[2], limits[3])
    ax.set_aspect("equal", adjustable="box")
    if plane is not None:
        xl, yl = plane.axis_labels(space)
        ax.set_xlabel(xl, labelpad=1)
        ax.set_ylabel(yl, labelpad=1)
    if not ticks:
        ax.set_xticks([])
        ax.set_yticks([])


def token_points(
    ax,
    xy,
    colors,
    vocab,
    label: str | None = "all",
    size: float = 9,
    marker="o",
    alpha: float = 1.0,
    edge=None,
    fontsize: float = 5.0,
    zorder=3,
    hollow: bool = False,
    lw: float = 0.6,
    positions=None,
):
    """Scatter V x T points (xy (V, T, 2)) in their tokens' colours.

    label: "all" labels every point (token + position subscript, de-overlapped; `positions`
    names the position of each column, 0..T-1 by default), "token" one label per token at its
    last position, None no labels.
    """
    xy = np.asarray(xy)
    V, T = xy.shape[:2]
    flat = xy.reshape(-1, 2)
    c = np.repeat(np.array(colors, dtype=object), T)
    kw = dict(s=size, marker=marker, alpha=alpha, zorder=zorder, linewidths=lw)
    if hollow:
        ax.scatter(flat[:, 0], flat[:, 1], facecolors="none", edgecolors=list(c), **kw)
    else:
        ax.scatter(flat[:, 0], flat[:, 1], c=list(c), edgecolors=edge or "none", **kw)
    if label == "all":
        where = range(T) if positions is None else [int(t) for t in positions]
        keys = [(vocab[v], t) for v in range(V) for t in where]
        style.queue_labels(ax, flat, keys, list(c), fontsize=fontsize)
    elif label == "token":
        style.queue_labels(
            ax, xy[:, -1], [(vocab[v], None) for v in range(V)], colors, fontsize=fontsize
        )


def backdrop(ax, xy, size: float = 5, color="#CCCCCC"):
    """All points in light gray: the context a sequence's points are drawn over."""
    flat = np.asarray(xy).reshape(-1, 2)
    ax.scatter(flat[:, 0], flat[:, 1], s=size, c=color, edgecolors="none", zorder=1)


def argmax_image(
    ax, land, colors, alpha: float = 1.0, zone_labels: bool = True, vocab=None, keep_clear=None
):
    """The landscape's argmax map in token colours, with each zone named at its deepest cell
    that covers no marker, no label and none of the segments `keep_clear` ((N, 2, 2) data
    coordinates: arrows drawn over the map)."""
    lut = ListedColormap(colors)
    ax.imshow(
        land.argmax,
        origin="lower",
        extent=land.extent,
        cmap=lut,
        vmin=-0.5,
        vmax=len(colors) - 0.5,
        alpha=alpha,
        interpolation="nearest",
        zorder=0,
        aspect="equal",
    )
    if zone_labels and vocab is not None:
        # Named once the layout is known (style.finish), at the deepest spot of the zone that
        # covers no marker and no other label.
        for token, spots in zone_spots(land).items():
            style.queue_zone_label(ax, vocab[token], spots, land, token, keep_clear)


def zone_spots(land, max_cells: int = 80) -> dict[int, np.ndarray]:
    """For each argmax zone, the spots its name may take, best first (S, 2): the cell deepest
    inside the zone (found by repeated erosion of the zone on a coarse grid, so the name sits
    inside even a curved or thin zone), then every other cell of the zone, deeper cells first
    and, at equal depth, nearer that deepest cell first."""
    step = max(1, len(land.xs) // max_cells)
    labels = land.argmax[::step, ::step]
    xs, ys = land.xs[::step], land.ys[::step]
    spots = {}
    for token in np.unique(labels):
        mask = labels == token
        if mask.sum() < 4:
            continue
        depth = np.zeros(mask.shape, dtype=int)
        last = mask
        while mask.any():
            depth += mask
            last = mask
            inner = np.zeros_like(mask)
            inner[1:-1, 1:-1] = (
                mask[1:-1, 1:-1]
                & mask[:-2, 1:-1]
                & mask[2:, 1:-1]
                & mask[1:-1, :-2]
                & mask[1:-1, 2:]
            )
            mask = inner
        deepest = np.argwhere(last)[len(np.argwhere(last)) // 2]
        cells = np.argwhere(depth > 0)
        near = ((cells - deepest) ** 2).sum(1)
        cells = cells[np.lexsort((near, -depth[cells[:, 0], cells[:, 1]]))]
        spots[int(token)] = np.column_stack([xs[cells[:, 1]], ys[cells[:, 0]]])
    return spots


def field_image(ax, fld, vmax=None, alpha: float = 1.0):
    """A signed scalar field (e.g. q . k over the key plane) on a diverging map centred on 0."""
    vmax = vmax or symmetric(fld.values)
    return ax.imshow(
        fld.values,
        origin="lower",
        extent=fld.extent,
        cmap=cmap(style.DIVERGING),
        norm=TwoSlopeNorm(0.0, -vmax, vmax),
        alpha=alpha,
        zorder=0,
        aspect="equal",
    )


def finish(fig, note: str, *title_args, **title_kwargs):
    """The figure with its footnote (if any) and its title, ready to return."""
    if note:
        footnote(fig, note)
    if title_args:  # a long title (a deep model's block note) wraps instead of leaving the page
        size = title_kwargs.get("fontsize", matplotlib.rcParams["figure.titlesize"])
        title_args = (fit_width(fig, title_args[0], size), *title_args[1:])
    fig.suptitle(*title_args, **title_kwargs)
    return fig


def fit_width(fig, text: str, fontsize) -> str:
    """`text` wrapped into lines that fit the figure's width at `fontsize` (an average glyph is
    about 0.55 em wide in the sans-serif face the figures use)."""
    import textwrap
    from matplotlib.font_manager import FontProperties

    points = FontProperties(size=fontsize).get_size_in_points()
    per_line = max(20, int(fig.get_figwidth() * 72 / (0.55 * points)) - 2)
    glued = str(text).replace("step ", "step\u00a0")  # "step 20000" stays on one line
    lines = textwrap.wrap(glued, per_line, break_long_words=False)
    return "\n".join(lines).replace("\u00a0", " ") or str(text)


def footnote(fig, text: str):
    """A small gray remark under the figure (which block or head is shown, what a background
    means); constrained layout keeps room for it."""
    fig.supxlabel(fit_width(fig, text, 5.5), fontsize=5.5, color="#555555", x=0.01, ha="left")
