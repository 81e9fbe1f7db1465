"""Figures of the learned geometry: embeddings (fig05), the Q/K/V projections (fig06) and the
supplementary Q/K/V overview and per-dimension heatmaps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import compute as C
from . import style
from .context import FigureContext
from .panels import (
    backdrop,
    colorbar,
    finish,
    footnote,
    heatmap,
    new_figure,
    plane_axes,
    styled,
    token_points,
)

SPACES = ("query", "key", "value")
SPACE_COLORS = {"query": style.QUERY_COLOR, "key": style.KEY_COLOR, "value": style.VALUE_COLOR}


@dataclass
class EmbeddingFigure:
    vocab: list[str]
    colors: list[str]
    token: np.ndarray  # (V, d)
    position: np.ndarray  # (T, d)
    combined_axes: np.ndarray  # (2, V, T): the combined points' plane coordinates
    token_2d: np.ndarray  # (V, 2)
    position_2d: np.ndarray  # (T, 2)
    combined_2d: np.ndarray  # (V, T, 2)
    planes: dict  # "token", "position", "combined" -> Plane
    title: str
    positions: np.ndarray  # (T,) the position of each row of `position`
    shown: str = ""  # which points a large model's figure shows ("": all)
    positions_note: str = ""  # why p is 0, where positions do not enter the stream


def compute_embeddings(ctx: FigureContext) -> EmbeddingFigure:
    e = ctx.embeddings
    return EmbeddingFigure(
        e.vocab,
        ctx.shown_colors,
        e.token,
        e.position,
        np.moveaxis(e.combined_2d, -1, 0),
        e.token_2d,
        e.position_2d,
        e.combined_2d,
        {"token": e.token_plane, "position": e.position_plane, "combined": e.plane},
        ctx.title,
        ctx.shown.positions,
        ctx.shown.note,
        ctx.positions_note,
    )


def dim_names(n: int) -> list[str]:
    """Column names 1..n of a vector heatmap; past 8 only the first and every k-th is written
    (k = 4 up to 32 dims, 8 up to 64, ...: at most nine names), so that a 16-dim or a 256-dim
    stream's labels do not run into each other."""
    k = 4 * -(-n // 32)
    return [str(i + 1) if n <= 8 or i == 0 or (i + 1) % k == 0 else "" for i in range(n)]


@styled
def draw_embeddings(data: EmbeddingFigure, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 6.2, fig)
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.35, 3.3])
    axes = top.subplots(1, 4, width_ratios=[1, 1, 1.5, 1.5])
    V, d = data.token.shape
    T = data.position.shape[0]
    small = d <= 4
    heatmap(
        axes[0], data.token, rows=data.vocab, cols=dim_names(d), annotate=small, title="token x"
    )
    positions = [str(t) for t in data.positions]
    heatmap(
        axes[1],
        data.position,
        rows=positions,
        cols=dim_names(d),
        annotate=small,
        title="position p",
    )
    names = data.planes["combined"].axis_labels()
    vmax = np.abs(data.combined_axes).max()
    for ax, values, name in zip(axes[2:], data.combined_axes, names):
        heatmap(
            ax,
            values,
            rows=data.vocab,
            cols=positions,
            vmin=-vmax,
            vmax=vmax,
            annotate=False,
            title=f"e = x + p, {name}",
        )
        ax.set_xlabel("position", labelpad=1)
    left, right = bottom.subfigures(1, 2, width_ratios=[1, 2.1])
    ax_tok, ax_pos = left.subplots(2, 1)
    lim = C.square_limits(data.token_2d)
    ax_tok.scatter(*data.token_2d.T, c=data.colors, s=14, zorder=3)
    style.queue_labels(
        ax_tok, data.token_2d, [(v, None) for v in data.vocab], data.colors, fontsize=5.5
    )
    plane_axes(ax_tok, lim, data.planes["token"])
    ax_tok.set_title("tokens x")
    lim = C.square_limits(data.position_2d, pad=0.2)
    ax_pos.plot(*data.position_2d.T, color="#999999", lw=0.6, zorder=1)
    ax_pos.scatter(*data.position_2d.T, c=np.arange(T), cmap=style.SEQUENTIAL, s=14, zorder=3)
    style.queue_labels(
        ax_pos, data.position_2d, [("p", t) for t in data.positions], ["#333333"] * T, fontsize=5.5
    )
    plane_axes(ax_pos, lim, data.planes["position"])
    ax_pos.set_title("positions p (the ladder)")
    ax = right.subplots()
    token_points(
        ax,
        data.combined_2d,
        data.colors,
        data.vocab,
        label="all",
        size=10,
        positions=data.positions,
    )
    plane_axes(ax, C.square_limits(data.combined_2d), data.planes["combined"])
    which = "The" if data.shown else "All"
    ax.set_title(f"{which} {V} x {T} combined embeddings e = x + p (label: token, position)")
    note = "; ".join(n for n in (data.shown, data.positions_note) if n)
    return finish(fig, note, f"Embeddings: {data.title}", fontsize=8)


@dataclass
class QKVFigure:
    vocab: list[str]
    colors: list[str]
    combined_2d: np.ndarray  # (V, T, 2)
    spaces: dict  # "query"/"key"/"value" -> (V, T, 2)
    planes: dict  # "combined"/"query"/"key"/"value" -> Plane
    weights: dict  # "query"/"key"/"value" -> (d, dh) of the head shown
    limits: dict  # space -> limits; query and key share theirs (compared by q.k)
    note: str
    title: str
    positions: np.ndarray  # (T,) the position of each point column


def compute_qkv(ctx: FigureContext, head: int = 0) -> QKVFigure:
    """The combined points and their images in head `head`'s query, key and value spaces, with
    the matrices that map them (LayerNorm, when the model has it, is applied first)."""
    proj, e = ctx.projections, ctx.embeddings
    planes = {"combined": e.plane}
    spaces = {}
    for name, letter in zip(SPACES, "qkv"):
        planes[name] = proj.plane(letter, head)
        spaces[name] = planes[name].project(getattr(proj, letter)[:, :, head])
    weights = {name: C.head_weight(ctx.model, letter, head) for name, letter in zip(SPACES, "QKV")}
    qk = C.square_limits(spaces["query"], spaces["key"])
    limits = {"query": qk, "key": qk, "value": C.square_limits(spaces["value"])}
    return QKVFigure(
        e.vocab,
        ctx.shown_colors,
        e.combined_2d,
        spaces,
        planes,
        weights,
        limits,
        "; ".join(n for n in (ctx.block_note(), ctx.shown.note) if n),
        ctx.title,
        ctx.shown.positions,
    )


def emptiest_corner(xy, limits) -> tuple[float, float]:
    """Lower-left (x, y) in axes fraction of the corner square (0.3 wide) holding fewest points."""
    p = np.asarray(xy).reshape(-1, 2)
    fx = (p[:, 0] - limits[0]) / (limits[1] - limits[0])
    fy = (p[:, 1] - limits[2]) / (limits[3] - limits[2])
    corners = [(0.0, 0.7), (0.7, 0.7), (0.0, 0.0), (0.7, 0.0)]
    counts = [
        np.sum((fx >= x - 0.02) & (fx <= x + 0.32) & (fy >= y - 0.02) & (fy <= y + 0.32))
        for x, y in corners
    ]
    return corners[int(np.argmin(counts))]


def weight_inset(ax, matrix, letter: str, corner=(0.0, 0.7)):
    """The projection matrix as a small annotated heatmap in the panel's emptiest corner."""
    inset = ax.inset_axes([corner[0] + 0.01, corner[1] + 0.01, 0.26, 0.24])
    d, dh = matrix.shape
    heatmap(inset, matrix, annotate=d * dh <= 16, fontsize=4.2)
    inset.set_xticks([])
    inset.set_yticks([])
    inset.set_title(f"W_{letter}", fontsize=5.5, pad=1)


@styled
def draw_qkv(data: QKVFigure, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 6.6, fig)
    axes = fig.subplots(2, 2).ravel()
    token_points(
        axes[0], data.combined_2d, data.colors, data.vocab, label="token", size=8, fontsize=6.5
    )
    plane_axes(axes[0], C.square_limits(data.combined_2d), data.planes["combined"])
    axes[0].set_title("embeddings e")
    for ax, name in zip(axes[1:], SPACES):
        token_points(
            ax, data.spaces[name], data.colors, data.vocab, label="token", size=8, fontsize=6.5
        )
        plane_axes(ax, data.limits[name], data.planes[name])
        ax.set_title(f"{name} space", color=SPACE_COLORS[name])
        weight_inset(
            ax,
            data.weights[name],
            name[0].upper(),
            emptiest_corner(data.spaces[name], data.limits[name]),
        )
        for spine in ax.spines.values():
            spine.set_edgecolor(SPACE_COLORS[name])
    return finish(
        fig,
        data.note,
        f"Queries, keys and values of all combined embeddings: {data.title}",
        fontsize=8,
    )


@dataclass
class QKVOverview:
    qkv: QKVFigure
    sequence: dict  # space -> (T, 2): the traced sequence's points
    sequence_keys: list  # (token, position) per sequence position
    sequence_text: str
    sequence_colors: list  # per sequence position


def compute_qkv_overview(ctx: FigureContext, head: int = 0) -> QKVOverview:
    """fig06's data plus the traced sequence's own q, k, v (read from its cache)."""
    qkv = compute_qkv(ctx, head)
    block = ctx.trace.blocks[0]
    seq = {
        name: qkv.planes[name].project(getattr(block, letter)[:, head])
        for name, letter in zip(SPACES, "qkv")
    }
    keys = [(ctx.vocab[t], i) for i, t in enumerate(ctx.trace.tokens)]
    colors = [ctx.colors[t] for t in ctx.trace.tokens]
    return QKVOverview(qkv, seq, keys, " ".join(ctx.trace.token_text), colors)


@styled
def draw_qkv_overview(data: QKVOverview, fig=None):
    q = data.qkv
    fig = new_figure(style.PAGE_WIDTH, 6.9, fig)
    axes = fig.subplots(3, 3, width_ratios=[0.7, 1, 1])
    for row, name in zip(axes, SPACES):
        letter = name[0].upper()
        heatmap(
            row[0],
            q.weights[name],
            rows=dim_names(q.weights[name].shape[0]),
            cols=dim_names(q.weights[name].shape[1]),
            fontsize=6,
            title=f"W_{letter} (d_model x d_head)",
        )
        token_points(row[1], q.spaces[name], q.colors, q.vocab, label="token", size=7, fontsize=6)
        plane_axes(row[1], q.limits[name], q.planes[name])
        row[1].set_title(f"all points in {name} space", color=SPACE_COLORS[name])
        backdrop(row[2], q.spaces[name])
        seq = data.sequence[name]
        colors = data.sequence_colors
        row[2].scatter(*seq.T, c=colors, s=16, zorder=3, edgecolors="white", linewidths=0.4)
        style.queue_labels(row[2], seq, data.sequence_keys, colors, fontsize=6)
        plane_axes(row[2], q.limits[name], q.planes[name])
        row[2].set_title(f"the sequence in {name} space", color=SPACE_COLORS[name])
    if q.note:
        footnote(fig, q.note)
    fig.suptitle(f'Q/K/V overview: {q.title}; sequence "{data.sequence_text}"', fontsize=8)
    return fig


@dataclass
class QKVDimensions:
    vocab: list[str]
    values: dict  # space -> (2, V, T) coordinates along the plane's axes
    axis_names: dict  # space -> (name 1, name 2)
    note: str
    title: str
    positions: np.ndarray  # (T,) the position of each column


def compute_qkv_dimensions(ctx: FigureContext, head: int = 0) -> QKVDimensions:
    """Each point's query, key and value coordinates as token x position tables."""
    qkv = compute_qkv(ctx, head)
    values = {n: np.moveaxis(qkv.spaces[n], -1, 0) for n in SPACES}
    names = {n: qkv.planes[n].axis_labels() for n in SPACES}
    return QKVDimensions(qkv.vocab, values, names, qkv.note, ctx.title, qkv.positions)


@styled
def draw_qkv_dimensions(data: QKVDimensions, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 7.4, fig)
    axes = fig.subplots(3, 2)
    for row, name in zip(axes, SPACES):
        vmax = np.abs(data.values[name]).max()
        for ax, values, axis in zip(row, data.values[name], data.axis_names[name]):
            image = heatmap(
                ax,
                values,
                rows=data.vocab,
                cols=[str(t) for t in data.positions],
                vmin=-vmax,
                vmax=vmax,
                annotate=False,
            )
            ax.set_title(f"{name}, {axis or 'dim 1'}", color=SPACE_COLORS[name])
            ax.set_xlabel("position", labelpad=1)
        colorbar(fig, image, list(row))
    return finish(
        fig,
        data.note,
        f"Query, key and value coordinates per token and position: {data.title}",
        fontsize=8,
    )
