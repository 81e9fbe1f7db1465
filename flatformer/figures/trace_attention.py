"""The traced sequence's attention (fig13) and the attention and read-out matrices of three
sequences (supplementary)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import compute as C
from . import style
from .context import FigureContext
from .panels import (
    colorbar,
    field_image,
    heatmap,
    new_figure,
    finish,
    plane_axes,
    styled,
    symmetric,
)
from .trace import compute_trace_qk, dim_cols, row_names


# --------------------------------------------------------------------------- fig13


@dataclass
class TraceAttention:
    keys: list
    colors: list[str]
    k_2d: np.ndarray  # (T, 2)
    q_2d: np.ndarray  # (T, 2)
    fields: list  # per query position: Field of q_i . k / sqrt(dh)
    scores: np.ndarray  # (T, T) with NaN where masked
    pattern: np.ndarray  # (T, T)
    plane: C.Plane
    limits: tuple
    note: str
    title: str


def compute_trace_attention(
    ctx: FigureContext, head: int = 0, resolution: int = 80
) -> TraceAttention:
    """For every query of the sequence, its dot product over the key plane (with the sequence's
    keys on it), then the masked scores and the attention pattern read from the cache."""
    qk = compute_trace_qk(ctx, head)
    block = ctx.trace.blocks[0]
    fields = [C.qk_field(q, qk.plane, qk.limits, resolution) for q in block.q[:, head]]
    scores = np.where(np.isfinite(block.scores[head]), block.scores[head], np.nan)
    notes = [qk.note] + ([] if qk.plane.is_identity else [C.SLICE_NOTE])
    return TraceAttention(
        qk.keys,
        qk.colors,
        qk.k_2d,
        qk.q_2d,
        fields,
        scores,
        block.pattern[head],
        qk.plane,
        qk.limits,
        "; ".join(n for n in notes if n),
        qk.title,
    )


@styled
def draw_trace_attention(data: TraceAttention, fig=None):
    T = len(data.keys)
    ncols = min(T, 4)
    nrows = -(-T // ncols)
    fig = new_figure(style.PAGE_WIDTH, 1.75 * nrows + 2.9, fig)
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.75 * nrows, 2.9])
    axes = np.atleast_1d(top.subplots(nrows, ncols)).ravel()
    vmax = max(symmetric(f.values) for f in data.fields)
    for i, ax in enumerate(axes):
        if i >= T:
            ax.axis("off")
            continue
        image = field_image(ax, data.fields[i], vmax=vmax, alpha=0.85)
        visible = np.arange(T) <= i
        ax.scatter(
            *data.k_2d[~visible].T,
            marker="^",
            s=12,
            facecolors="none",
            edgecolors=style.MASKED_COLOR,
            linewidths=0.6,
            zorder=2,
        )
        colors = [c for c, v in zip(data.colors, visible) if v]
        ax.scatter(
            *data.k_2d[visible].T,
            marker="^",
            s=16,
            c=colors,
            edgecolors="white",
            linewidths=0.4,
            zorder=3,
        )
        style.queue_labels(
            ax, data.k_2d[visible], [k for k, v in zip(data.keys, visible) if v], colors, fontsize=5
        )
        ax.scatter(
            *data.q_2d[i],
            marker="*",
            s=50,
            c=data.colors[i],
            edgecolors="white",
            linewidths=0.5,
            zorder=4,
        )
        plane_axes(ax, data.limits, ticks=False)
        ax.set_title(f"query {style.point_text(*data.keys[i])}", fontsize=6.5, pad=2)
    colorbar(top, image, list(axes), "q · k / √d_head", shrink=0.8)
    ax_s, ax_p = bottom.subplots(1, 2)
    names = row_names(data.keys)
    small = T <= 10
    image = heatmap(
        ax_s,
        data.scores,
        rows=names,
        cols=names,
        annotate=small,
        fmt="{:.1f}",
        fontsize=4.3,
        title="scores q · k / √d_head (gray: masked)",
    )
    colorbar(bottom, image, ax_s)
    image = heatmap(
        ax_p,
        data.pattern,
        rows=names,
        cols=names,
        cmap_name=style.WEIGHTS,
        vmin=0,
        vmax=1,
        annotate=small,
        fmt="{:.2f}",
        fontsize=4.3,
        title="attention pattern (softmax of each row)",
    )
    colorbar(bottom, image, ax_p)
    for ax in (ax_s, ax_p):
        ax.set_xlabel("key", labelpad=1)
        ax.set_ylabel("query", labelpad=1)
        ax.tick_params(axis="x", labelrotation=90)
    return finish(
        fig,
        data.note,
        f"Trace, step 3, attention (keys after the query hidden, gray): {data.title}",
        fontsize=8,
    )


# --------------------------------------------------------------------------- supplementary


@dataclass
class AttentionMatrices:
    vocab: list[str]
    rows: list  # per sequence: (keys, pattern (T,T), lm_in (T,d), logits, probs)
    note: str
    title: str


def example_sequences(ctx: FigureContext, n: int = 2) -> list[np.ndarray]:
    """Full-context held-out windows whose last position is one the rule constrains (the model's
    hardest kind of prediction), distinct from each other."""
    inputs, index = ctx.rule_windows[:2]
    picked, seen = [], set()
    for window, i in zip(inputs, index):
        if i == len(window) - 1 and tuple(window) not in seen:
            picked.append(window)
            seen.add(tuple(window))
            if len(picked) == n:
                break
    return picked


def compute_attention_matrices(ctx: FigureContext, head: int = 0) -> AttentionMatrices:
    """For the traced sequence and two held-out windows: block 0's attention pattern, the
    LM head's input (the last residual), the logits and the probabilities."""
    rows = []
    for tokens in [ctx.sequence] + example_sequences(ctx):
        tr = C.trace(ctx.model, tokens, ctx.vocab)
        keys = [(w, i) for i, w in enumerate(tr.token_text)]
        rows.append(
            (keys, tr.blocks[0].pattern[head], tr.blocks[-1].resid_post, tr.logits, tr.probs)
        )
    return AttentionMatrices(ctx.vocab, rows, ctx.block_note(), ctx.title)


@styled
def draw_attention_matrices(data: AttentionMatrices, fig=None):
    n = len(data.rows)
    fig = new_figure(style.PAGE_WIDTH, 2.35 * n + 0.3, fig)
    T = max(len(r[0]) for r in data.rows)
    d, V = data.rows[0][2].shape[1], len(data.vocab)
    axes = np.atleast_2d(fig.subplots(n, 4, width_ratios=[T, max(d, 2) * 1.3, V, V]))
    for row, (keys, pattern, lm_in, logits, probs) in zip(axes, data.rows):
        names = row_names(keys)
        heatmap(
            row[0],
            pattern,
            rows=names,
            cols=names,
            cmap_name=style.WEIGHTS,
            vmin=0,
            vmax=1,
            annotate=T <= 10,
            fmt="{:.1f}",
            title="attention pattern",
        )
        row[0].tick_params(axis="x", labelrotation=90)
        heatmap(
            row[1],
            lm_in,
            rows=names,
            cols=dim_cols(d),
            annotate=d <= 3,
            fmt="{:.1f}",
            title="LM-head input",
        )
        heatmap(row[2], logits, rows=names, cols=data.vocab, annotate=False, title="logits")
        heatmap(
            row[3],
            probs,
            rows=names,
            cols=data.vocab,
            cmap_name=style.SEQUENTIAL,
            vmin=0,
            vmax=1,
            annotate=False,
            title="probabilities",
        )
        for ax in row[2:]:
            ax.tick_params(axis="x", labelsize=5 if V <= 16 else 3.5, labelrotation=90)
            ax.set_yticks([])
        for ax in row[1:2]:
            ax.set_yticks([])
    return finish(
        fig,
        data.note,
        f"Attention and read-out for three sequences (rows: positions): {data.title}",
        fontsize=8,
    )
