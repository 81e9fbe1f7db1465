"""The traced sequence's values (fig14) and the nudge that moves it into the right zone (fig15)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import compute as C
from . import style
from .context import FigureContext
from .panels import (
    argmax_image,
    backdrop,
    heatmap,
    new_figure,
    finish,
    plane_axes,
    styled,
    symmetric,
)
from .trace import dim_cols, row_names, seq_colors, seq_keys, sequence_title


# --------------------------------------------------------------------------- fig14


@dataclass
class TraceValues:
    keys: list
    colors: list[str]
    v: np.ndarray  # (T, dh) head shown
    z: np.ndarray  # (T, dh) = pattern @ v
    attn_out: np.ndarray  # (T, d) all heads, into the residual stream
    v_2d: np.ndarray  # (T, 2) in the value plane
    z_2d: np.ndarray
    all_v: np.ndarray  # (V, T, 2)
    plane: C.Plane
    note: str
    title: str


def compute_trace_values(ctx: FigureContext, head: int = 0) -> TraceValues:
    block, proj = ctx.trace.blocks[0], ctx.projections
    plane = proj.plane("v", head)
    return TraceValues(
        seq_keys(ctx),
        seq_colors(ctx),
        block.v[:, head],
        block.z[:, head],
        block.attn_out,
        plane.project(block.v[:, head]),
        plane.project(block.z[:, head]),
        plane.project(proj.v[:, :, head]),
        plane,
        ctx.block_note(),
        sequence_title(ctx),
    )


@styled
def draw_trace_values(data: TraceValues, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 3.3, fig)
    axes = fig.subplots(1, 4, width_ratios=[0.6, 0.6, 0.6, 2.2])
    names = row_names(data.keys)
    vmax = symmetric(np.concatenate([data.v, data.z]))
    heatmap(
        axes[0],
        data.v,
        rows=names,
        cols=dim_cols(data.v.shape[1]),
        vmin=-vmax,
        vmax=vmax,
        annotate=data.v.shape[1] <= 3,
        fontsize=4.6,
        title="values v",
    )
    heatmap(
        axes[1],
        data.z,
        rows=names,
        cols=dim_cols(data.z.shape[1]),
        vmin=-vmax,
        vmax=vmax,
        annotate=data.z.shape[1] <= 3,
        fontsize=4.6,
        title="A v",
    )
    heatmap(
        axes[2],
        data.attn_out,
        rows=names,
        cols=dim_cols(data.attn_out.shape[1]),
        annotate=data.attn_out.shape[1] <= 3,
        fontsize=4.6,
        title="Attn(e)",
    )
    ax = axes[3]
    backdrop(ax, data.all_v)
    ax.scatter(
        *data.v_2d.T,
        s=20,
        facecolors="none",
        linewidths=0.9,
        edgecolors=data.colors,
        zorder=3,
        label="value v_j (open)",
    )
    ax.scatter(
        *data.z_2d.T,
        c=data.colors,
        s=22,
        edgecolors="black",
        linewidths=0.5,
        zorder=4,
        label="A v at query i (filled)",
    )
    for start, end in zip(data.v_2d, data.z_2d):
        ax.annotate(
            "",
            end,
            start,
            arrowprops=dict(arrowstyle="->", color="#999999", lw=0.5, shrinkA=2, shrinkB=2),
            zorder=2,
        )
    keys = [("v " + t, i) for t, i in data.keys] + [("Av " + t, i) for t, i in data.keys]
    style.queue_labels(
        ax, np.concatenate([data.v_2d, data.z_2d]), keys, data.colors * 2, fontsize=5.5
    )
    plane_axes(ax, C.square_limits(data.all_v, data.z_2d), data.plane, "value")
    ax.legend(loc="best", frameon=False, handletextpad=0.2, fontsize=5.5)
    ax.set_title("values and their weighted sums (arrow: v_i to A v at i)")
    return finish(
        fig, data.note, f"Trace, step 4, values and attention output: {data.title}", fontsize=8
    )


# --------------------------------------------------------------------------- fig15


@dataclass
class TraceNudge:
    vocab: list[str]
    colors: list[str]
    keys: list
    land: C.Landscape
    plane: C.Plane
    limits: tuple
    start: np.ndarray  # (T, 2) e (the last block's input)
    end: np.ndarray  # (T, 2) z = e + Attn(e)
    focus_positions: np.ndarray  # positions holding the focus token
    allowed: np.ndarray  # (T, V) tokens the rule allows next
    decided: np.ndarray  # (T,) whether the rule constrains the next token at all
    landed: np.ndarray  # (T,) argmax of the output network at z (the model's guess)
    start_name: str  # "e", or the last block's input in a deeper model
    note: str
    title: str


def compute_trace_nudge(ctx: FigureContext) -> TraceNudge:
    """Where each position starts (e) and ends (z = e + Attn(e)) on the output landscape, the
    zone it lands in, and what the rule allows next."""
    land = ctx.landscape  # raises NotInPlane unless d_model == 2
    last = ctx.trace.blocks[-1]
    plane = ctx.embeddings.plane
    landed = C.output_logits(ctx.model, last.resid_mid).argmax(-1)
    focus = np.flatnonzero(ctx.trace.tokens == ctx.focus)
    from .landscape import landscape_note

    return TraceNudge(
        ctx.vocab,
        ctx.colors,
        seq_keys(ctx),
        land,
        plane,
        ctx.limits,
        plane.project(last.resid_pre),
        plane.project(last.resid_mid),
        focus,
        *C.next_allowed(ctx.task, ctx.trace.tokens),
        landed,
        "e" if ctx.cfg.n_layers == 1 else f"block {ctx.cfg.n_layers - 1}'s input",
        landscape_note(ctx),
        sequence_title(ctx),
    )


@styled
def draw_trace_nudge(data: TraceNudge, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 5.2, fig)
    ax, ax_text = fig.subplots(1, 2, width_ratios=[3, 1])
    argmax_image(ax, data.land, data.colors, alpha=0.45, vocab=data.vocab)
    T = len(data.keys)
    focus = set(data.focus_positions.tolist())
    for i in range(T):
        bold = i in focus
        ax.annotate(
            "",
            data.end[i],
            data.start[i],
            zorder=4 if bold else 3,
            arrowprops=dict(
                arrowstyle="-|>",
                mutation_scale=8 if bold else 5,
                color="black" if bold else "#777777",
                lw=1.3 if bold else 0.5,
                shrinkA=2,
                shrinkB=1,
            ),
        )
    colors = [data.colors[data.vocab.index(t)] for t, _ in data.keys]
    ax.scatter(*data.start.T, c=colors, s=16, edgecolors="white", linewidths=0.5, zorder=5)
    ax.scatter(
        *data.end.T, c=colors, s=24, marker="D", edgecolors="black", linewidths=0.6, zorder=5
    )
    first = "e " if data.start_name == "e" else ""
    keys = [(first + t, i) for t, i in data.keys] + [("z " + t, i) for t, i in data.keys]
    style.queue_labels(ax, np.concatenate([data.start, data.end]), keys, colors * 2, fontsize=5.5)
    plane_axes(ax, data.limits, data.plane)
    ax.set_title(
        f"{data.start_name} (dot) moved by attention to z = {data.start_name} + Attn "
        f"(diamond), over the argmax map",
        fontsize=7,
    )
    lines = ["position: z lands in", "(what the rule allows)", ""]
    for i in range(T):
        name = style.point_text(*data.keys[i])
        got = data.vocab[data.landed[i]]
        if data.decided[i]:
            allowed = [data.vocab[t] for t in np.flatnonzero(data.allowed[i])]
            want = " ".join(allowed[:4]) + (" ..." if len(allowed) > 4 else "")
            mark = "✓" if data.allowed[i, data.landed[i]] else "✗"
            word = "target" if len(allowed) == 1 else "allowed"
            lines.append(f"{name}: {got}  ({word} {want}) {mark}")
        else:
            lines.append(f"{name}: {got}")
    ax_text.axis("off")
    ax_text.text(
        0.0,
        1.0,
        "\n".join(lines),
        va="top",
        ha="left",
        fontsize=6.5,
        transform=ax_text.transAxes,
        linespacing=1.5,
    )
    return finish(
        fig,
        data.note,
        f"Trace, step 5, the nudge (bold: the focus token): {data.title}",
        fontsize=8,
    )
