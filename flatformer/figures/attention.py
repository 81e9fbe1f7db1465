"""Figures of the query-key geometry: the joint Q/K space with one query's dot-product field
(fig07), the focus token's scores against every key (fig08) and the full score matrix."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import compute as C
from . import style
from .context import FigureContext
from .panels import (
    cmap,
    colorbar,
    field_image,
    finish,
    footnote,
    new_figure,
    plane_axes,
    styled,
    symmetric,
    token_points,
)


@dataclass
class QKSpace:
    vocab: list[str]
    colors: list[str]
    queries: np.ndarray  # (V, T, 2) in the joint plane
    keys: np.ndarray  # (V, T, 2)
    plane: C.Plane
    limits: tuple  # panel (b): the square the field is computed on
    joint_limits: tuple  # panel (a): fitted to the queries and keys
    focus: int  # the focus query's token and position
    focus_position: int
    field: C.Field  # q_focus . k / sqrt(dh) over the plane
    note: str
    title: str
    positions: np.ndarray  # (T,) the position of each point column


def compute_qk_space(ctx: FigureContext, head: int = 0, resolution: int = 160) -> QKSpace:
    """All queries and keys in one plane, and the focus query's dot product with every key of
    that plane (the background of panel b)."""
    proj = ctx.projections
    plane = proj.qk_plane(head)
    q, k = plane.project(proj.q[:, :, head]), plane.project(proj.k[:, :, head])
    limits = C.square_limits(q, k)
    focus, at = ctx.shown_focus
    fld = C.qk_field(proj.q[focus, at, head], plane, limits, resolution)
    notes = [ctx.block_note(), ctx.shown.note] + ([] if plane.is_identity else [C.SLICE_NOTE])
    return QKSpace(
        ctx.shown_vocab,
        ctx.shown_colors,
        q,
        k,
        plane,
        limits,
        C.fitted_limits(q, k),
        focus,
        ctx.focus_position,
        fld,
        "; ".join(n for n in notes if n),
        ctx.title,
        ctx.shown.positions,
    )


@styled
def draw_qk_space(data: QKSpace, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 3.75, fig)
    ax_joint, ax_focus = fig.subplots(1, 2)
    V, T = data.queries.shape[:2]
    token_points(ax_joint, data.queries, data.colors, data.vocab, label=None, size=9)
    token_points(
        ax_joint, data.keys, data.colors, data.vocab, label=None, size=11, marker="^", hollow=True
    )
    # Queries and keys are labelled apart, so one label never names both kinds.
    for kind, points in (("q", data.queries), ("k", data.keys)):
        style.queue_labels(
            ax_joint,
            points[:, -1],
            [(f"{kind} {v}", None) for v in data.vocab],
            data.colors,
            fontsize=5.5,
        )
    plane_axes(ax_joint, data.joint_limits, data.plane, "Q/K")
    ax_joint.scatter([], [], s=9, c="#555555", label="query")
    ax_joint.scatter([], [], s=11, marker="^", facecolors="none", edgecolors="#555555", label="key")
    ax_joint.legend(loc="lower left", frameon=False, handletextpad=0.2)
    ax_joint.set_title("(a) every query and key")

    image = field_image(ax_focus, data.field, alpha=0.85)
    visible = data.positions <= data.focus_position
    keys = data.keys.copy()
    hidden = keys[:, ~visible].reshape(-1, 2)
    ax_focus.scatter(
        *hidden.T,
        s=8,
        marker="^",
        facecolors="none",
        edgecolors=style.MASKED_COLOR,
        linewidths=0.5,
        zorder=2,
    )
    shown = keys[:, visible]
    token_points(
        ax_focus,
        shown,
        data.colors,
        data.vocab,
        label="all",
        size=10,
        marker="^",
        edge="white",
        fontsize=5,
        positions=data.positions[visible],
    )
    at = int(np.searchsorted(data.positions, data.focus_position))
    qx, qy = data.queries[data.focus, at]
    ax_focus.scatter(
        [qx],
        [qy],
        marker="*",
        s=90,
        c=data.colors[data.focus],
        edgecolors="white",
        linewidths=0.6,
        zorder=6,
    )
    style.queue_labels(
        ax_focus,
        [(qx, qy)],
        [("query " + data.vocab[data.focus], data.focus_position)],
        ["black"],
        fontsize=6.5,
    )
    plane_axes(ax_focus, data.limits, data.plane, "Q/K")
    colorbar(fig, image, ax_focus, "q · k / √d_head")
    ax_focus.set_title(
        f"(b) query {style.point_text(data.vocab[data.focus], data.focus_position)}"
        f" and every key (gray: masked)"
    )
    return finish(fig, data.note, f"Query/key space: {data.title}", fontsize=8)


@dataclass
class FocusScores:
    vocab: list[str]
    focus: int
    blocks: np.ndarray  # (V, T, T): [key token, query position, key position], NaN masked
    note: str
    title: str
    positions: np.ndarray  # (T,) the position of each row and column of a block
    shown: str = ""  # which points a large model's figure shows ("": all)


def compute_trigger_qk_scores(ctx: FigureContext, head: int = 0) -> FocusScores:
    """Pre-softmax scores of the focus token's queries (every shown position) against every
    shown key, one (query position x key position) block per key token."""
    focus, _ = ctx.shown_focus
    positions = ctx.shown.positions
    scores = C.point_scores(ctx.projections, head, positions, query=focus)  # (T, V, T)
    return FocusScores(
        ctx.shown_vocab,
        focus,
        scores.transpose(1, 0, 2),
        ctx.block_note(),
        ctx.title,
        positions,
        ctx.shown.note,
    )


@styled
def draw_trigger_qk_scores(data: FocusScores, fig=None):
    V, T = data.blocks.shape[:2]
    ncols = min(V, 6 if V <= 12 else 7)
    nrows = -(-V // ncols)
    fig = new_figure(style.PAGE_WIDTH, 1.15 * nrows + 0.45, fig)
    axes = np.atleast_1d(fig.subplots(nrows, ncols)).ravel()
    vmax = symmetric(data.blocks)
    focus = data.vocab[data.focus]
    for b, ax in enumerate(axes):
        if b >= V:
            ax.axis("off")
            continue
        image = ax.imshow(data.blocks[b], cmap=cmap(style.DIVERGING), vmin=-vmax, vmax=vmax)
        ax.set_title(f"key {data.vocab[b]}", fontsize=7, pad=2)
        ticks = range(0, T, max(1, T // 4))
        ax.set_xticks(ticks, [str(data.positions[t]) for t in ticks])
        ax.set_yticks(ticks, [str(data.positions[t]) for t in ticks])
        ax.tick_params(length=0, labelsize=5)
        if b % ncols == 0:
            ax.set_ylabel(f"{focus} query position", labelpad=1)
        if b // ncols == nrows - 1 or b + ncols >= V:
            ax.set_xlabel("key position", labelpad=1)
    colorbar(fig, image, list(axes), "q · k / √d_head", shrink=0.7)
    extra = f" ({data.note})" if data.note else ""
    return finish(  # wrapped: a deep model's block note makes the title wider than the page
        fig,
        data.shown,
        f"Scores of every '{focus}' query against each key token, before the softmax "
        f"(gray: masked){extra}: {data.title}",
        fontsize=8,
    )


@dataclass
class FullScores:
    vocab: list[str]
    scores: np.ndarray  # (V*T, V*T): rows (query token, position), cols keys
    n_ctx: int
    note: str
    title: str
    positions: np.ndarray  # (T,) the position of each point within a token's block
    shown: str = ""  # which points a large model's figure shows ("": all)


def compute_qk_full(ctx: FigureContext, head: int = 0) -> FullScores:
    positions = ctx.shown.positions
    scores = C.point_scores(ctx.projections, head, positions)
    V, T = scores.shape[:2]
    return FullScores(
        ctx.shown_vocab,
        scores.reshape(V * T, V * T),
        T,
        ctx.block_note(),
        ctx.title,
        positions,
        ctx.shown.note,
    )


@styled
def draw_qk_full(data: FullScores, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 6.6, fig)
    ax = fig.add_subplot()
    n, T = data.scores.shape[0], data.n_ctx
    vmax = symmetric(data.scores)
    image = ax.imshow(
        data.scores, cmap=cmap(style.DIVERGING), vmin=-vmax, vmax=vmax, aspect="equal"
    )
    for edge in np.arange(T, n, T) - 0.5:
        ax.axhline(edge, color="white", lw=0.6)
        ax.axvline(edge, color="white", lw=0.6)
    centres = np.arange(len(data.vocab)) * T + (T - 1) / 2
    fs = 6 if len(data.vocab) <= 16 else 4.5
    ax.set_xticks(centres, data.vocab, fontsize=fs)
    ax.set_yticks(centres, data.vocab, fontsize=fs)
    ax.tick_params(length=0)
    if list(data.positions) == list(range(T)):
        within = f"positions 0..{T - 1}"
    else:
        within = "positions " + ",".join(map(str, data.positions))
    ax.set_xlabel(f"key: token ({within} within each block)")
    ax.set_ylabel(f"query: token ({within} within each block)")
    colorbar(fig, image, ax, "q · k / √d_head")
    if data.shown:
        footnote(fig, data.shown)
    extra = f" ({data.note})" if data.note else ""
    fig.suptitle(
        f"Every query against every key, before the softmax (gray: masked){extra}: {data.title}",
        fontsize=8,
    )
    return fig
