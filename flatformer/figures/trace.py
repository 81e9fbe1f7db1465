"""Figures that trace one sequence through the model: the helpers they share, fig11 (its
embeddings) and fig12 (its queries and keys). trace_attention.py draws fig13 and the
per-sequence attention matrices, trace_values.py fig14 and fig15, value_arrows.py the value
arrows of many held-out predictions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import compute as C
from . import style
from .context import FigureContext
from .panels import (
    backdrop,
    heatmap,
    new_figure,
    finish,
    plane_axes,
    styled,
    symmetric,
)


def seq_keys(ctx: FigureContext) -> list[tuple[str, int]]:
    return [(w, i) for i, w in enumerate(ctx.trace.token_text)]


def seq_colors(ctx: FigureContext) -> list[str]:
    return [ctx.colors[t] for t in ctx.trace.tokens]


def sequence_title(ctx: FigureContext) -> str:
    return f'{ctx.title}; "{" ".join(ctx.trace.token_text)}"'


def row_names(keys) -> list[str]:
    return [style.point_text(t, i) for t, i in keys]


def dim_cols(n: int) -> list[str]:
    from .embeddings import dim_names

    return dim_names(n)


# --------------------------------------------------------------------------- fig11


@dataclass
class TraceEmbeddings:
    keys: list  # (token, position) per sequence position
    colors: list[str]
    x: np.ndarray  # (T, d)
    p: np.ndarray  # (T, d)
    e: np.ndarray  # (T, d)
    e_2d: np.ndarray  # (T, 2)
    all_2d: np.ndarray  # (V, T, 2) the gray backdrop
    plane: C.Plane
    title: str


def compute_trace_embeddings(ctx: FigureContext) -> TraceEmbeddings:
    tr, emb = ctx.trace, ctx.embeddings
    return TraceEmbeddings(
        seq_keys(ctx),
        seq_colors(ctx),
        tr.embed,
        tr.pos_embed,
        tr.e,
        emb.plane.project(tr.e),
        emb.combined_2d,
        emb.plane,
        f'{ctx.title}; "{" ".join(tr.token_text)}"',
    )


@styled
def draw_trace_embeddings(data: TraceEmbeddings, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 3.3, fig)
    axes = fig.subplots(1, 4, width_ratios=[0.6, 0.6, 0.6, 2.3])
    names = row_names(data.keys)
    d = data.x.shape[1]
    vmax = symmetric(np.concatenate([data.x, data.p, data.e]))
    for ax, m, title in zip(
        axes[:3], (data.x, data.p, data.e), ("x (token)", "p (position)", "e = x + p")
    ):
        heatmap(
            ax,
            m,
            rows=names,
            cols=dim_cols(d),
            vmin=-vmax,
            vmax=vmax,
            annotate=d <= 3,
            fontsize=4.6,
            title=title,
        )
    ax = axes[3]
    backdrop(ax, data.all_2d)
    ax.plot(*data.e_2d.T, color="#AAAAAA", lw=0.5, zorder=2)
    ax.scatter(*data.e_2d.T, c=data.colors, s=22, edgecolors="white", linewidths=0.5, zorder=3)
    style.queue_labels(ax, data.e_2d, data.keys, data.colors, fontsize=6.5)
    plane_axes(ax, C.square_limits(data.all_2d), data.plane)
    ax.set_title("the sequence's e over all combined embeddings (gray)")
    fig.suptitle(f"Trace, step 1, embeddings: {data.title}", fontsize=8)
    return fig


# --------------------------------------------------------------------------- fig12


@dataclass
class TraceQK:
    keys: list
    colors: list[str]
    q: np.ndarray  # (T, dh) head shown
    k: np.ndarray
    q_2d: np.ndarray  # (T, 2) in the joint Q/K plane
    k_2d: np.ndarray
    all_q: np.ndarray  # (V, T, 2)
    all_k: np.ndarray
    plane: C.Plane
    limits: tuple
    note: str
    title: str


def compute_trace_qk(ctx: FigureContext, head: int = 0) -> TraceQK:
    """The sequence's queries and keys at block 0 (from its cache), in the joint Q/K plane of
    all points."""
    block, proj = ctx.trace.blocks[0], ctx.projections
    plane = proj.qk_plane(head)
    all_q, all_k = plane.project(proj.q[:, :, head]), plane.project(proj.k[:, :, head])
    return TraceQK(
        seq_keys(ctx),
        seq_colors(ctx),
        block.q[:, head],
        block.k[:, head],
        plane.project(block.q[:, head]),
        plane.project(block.k[:, head]),
        all_q,
        all_k,
        plane,
        C.square_limits(all_q, all_k),
        ctx.block_note(),
        sequence_title(ctx),
    )


@styled
def draw_trace_qk(data: TraceQK, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 3.3, fig)
    axes = fig.subplots(1, 3, width_ratios=[0.6, 0.6, 2.3])
    names = row_names(data.keys)
    dh = data.q.shape[1]
    vmax = symmetric(np.concatenate([data.q, data.k]))
    for ax, m, title, color in (
        (axes[0], data.q, "queries q", style.QUERY_COLOR),
        (axes[1], data.k, "keys k", style.KEY_COLOR),
    ):
        heatmap(
            ax,
            m,
            rows=names,
            cols=dim_cols(dh),
            vmin=-vmax,
            vmax=vmax,
            annotate=dh <= 3,
            fontsize=4.6,
        )
        ax.set_title(title, color=color)
    ax = axes[2]
    backdrop(ax, data.all_q)
    backdrop(ax, data.all_k)
    ax.scatter(
        *data.q_2d.T,
        c=data.colors,
        s=22,
        edgecolors=style.QUERY_COLOR,
        linewidths=0.8,
        zorder=3,
        label="query (blue edge)",
    )
    ax.scatter(
        *data.k_2d.T,
        c=data.colors,
        s=26,
        marker="^",
        edgecolors=style.KEY_COLOR,
        linewidths=0.8,
        zorder=3,
        label="key (red edge)",
    )
    keys = [("q " + t, i) for t, i in data.keys] + [("k " + t, i) for t, i in data.keys]
    style.queue_labels(
        ax, np.concatenate([data.q_2d, data.k_2d]), keys, data.colors * 2, fontsize=6
    )
    plane_axes(ax, data.limits, data.plane, "Q/K")
    ax.legend(loc="lower left", frameon=False, handletextpad=0.2)
    ax.set_title("the sequence's queries and keys over all points (gray)")
    return finish(fig, data.note, f"Trace, step 2, queries and keys: {data.title}", fontsize=8)
