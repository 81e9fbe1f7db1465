"""Figures of the output landscape: the output network (MLP + residual + unembedding) as a map
from the residual plane to next-token probabilities. Only defined when d_model == 2: the compute
functions raise NotInPlane otherwise, and the command reports the figure as skipped."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import compute as C
from . import style
from .context import FigureContext
from .panels import (
    argmax_image,
    cmap,
    colorbar,
    fit_width,
    footnote,
    new_figure,
    plane_axes,
    styled,
    token_points,
)


@dataclass
class LandscapeFigure:
    vocab: list[str]
    colors: list[str]
    land: C.Landscape
    plane: C.Plane
    limits: tuple
    overlay: np.ndarray | None  # (V, T, 2) points drawn over every panel, or None
    overlay_name: str
    note: str
    title: str


def landscape_note(ctx: FigureContext) -> str:
    if ctx.cfg.n_layers == 1:
        return ""
    return f"output network of block {ctx.cfg.n_layers - 1} (the last of {ctx.cfg.n_layers})"


def compute_output_landscape(ctx: FigureContext, overlay: str | None = None) -> LandscapeFigure:
    """P(next = token) over the plane for every token; `overlay` adds the combined embeddings
    ("embeddings") or the value vectors written into the residual stream ("values")."""
    land = ctx.landscape  # raises NotInPlane unless d_model == 2
    points = {None: None, "embeddings": ctx.embeddings.combined, "values": ctx.written}[overlay]
    plane = ctx.embeddings.plane
    return LandscapeFigure(
        ctx.vocab,
        ctx.colors,
        land,
        plane,
        ctx.limits,
        None if points is None else plane.project(points),
        overlay or "",
        landscape_note(ctx),
        ctx.title,
    )


def compute_landscape_embeddings(ctx: FigureContext) -> LandscapeFigure:
    return compute_output_landscape(ctx, "embeddings")


def compute_landscape_values(ctx: FigureContext) -> LandscapeFigure:
    return compute_output_landscape(ctx, "values")


@styled
def draw_output_landscape(data: LandscapeFigure, fig=None):
    V = len(data.vocab)
    ncols = min(V, 4 if V <= 12 else 6)
    nrows = -(-V // ncols)
    fig = new_figure(style.PAGE_WIDTH, 1.72 * nrows + 0.5, fig)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True)).ravel()
    for token, ax in enumerate(axes):
        if token >= V:
            ax.axis("off")
            continue
        image = ax.imshow(
            data.land.probs[..., token],
            origin="lower",
            extent=data.land.extent,
            cmap=cmap(style.SEQUENTIAL),
            vmin=0,
            vmax=1,
            aspect="equal",
        )
        if data.overlay is not None:
            token_points(
                ax, data.overlay, data.colors, data.vocab, label=None, size=4, edge="white", lw=0.25
            )
        plane_axes(ax, data.limits)
        ax.set_title(f"P(next = {data.vocab[token]})", fontsize=6.5, pad=2)
        for spine in ax.spines.values():
            spine.set_edgecolor(data.colors[token])
            spine.set_linewidth(1.2)
        ax.tick_params(labelsize=5)
    colorbar(fig, image, list(axes), "probability", shrink=0.6)
    what = {
        "": "",
        "embeddings": " with every combined embedding e (dots)",
        "values": " with every value vector written by attention (dots)",
    }[data.overlay_name]
    extra = f" ({data.note})" if data.note else ""
    fig.suptitle(fit_width(fig, f"Output landscape{what}{extra}: {data.title}", 8), fontsize=8)
    return fig


draw_landscape_embeddings = draw_output_landscape
draw_landscape_values = draw_output_landscape


@dataclass
class LandscapeSummary:
    base: LandscapeFigure
    combined: np.ndarray  # (V, T, 2)
    values: np.ndarray  # (V, T, 2)


def compute_landscape_summary(ctx: FigureContext) -> LandscapeSummary:
    """Entropy and argmax of the landscape, and the argmax with the combined embeddings and the
    value vectors over it (reading a point's zone is a logit lens on the plane)."""
    base = compute_output_landscape(ctx)
    plane = base.plane
    return LandscapeSummary(
        base, plane.project(ctx.embeddings.combined), plane.project(ctx.written)
    )


@styled
def draw_landscape_summary(data: LandscapeSummary, fig=None):
    b = data.base
    fig = new_figure(style.PAGE_WIDTH, 7.0, fig)
    (ax_h, ax_a), (ax_e, ax_v) = fig.subplots(2, 2)
    image = ax_h.imshow(
        b.land.entropy,
        origin="lower",
        extent=b.land.extent,
        cmap=cmap(style.SEQUENTIAL),
        vmin=0,
        vmax=np.log(len(b.vocab)),
        aspect="equal",
    )
    colorbar(fig, image, ax_h, f"entropy (nats; max ln {len(b.vocab)})")
    ax_h.set_title("(a) entropy of the prediction")
    argmax_image(ax_a, b.land, b.colors, vocab=b.vocab)
    ax_a.set_title("(b) most likely next token")
    argmax_image(ax_e, b.land, b.colors, alpha=0.35, zone_labels=False)
    token_points(
        ax_e, data.combined, b.colors, b.vocab, label="all", size=8, edge="black", fontsize=5
    )
    ax_e.set_title("(c) with the combined embeddings e")
    argmax_image(ax_v, b.land, b.colors, alpha=0.35, zone_labels=False)
    token_points(
        ax_v, data.values, b.colors, b.vocab, label="token", size=8, edge="black", fontsize=6
    )
    ax_v.set_title("(d) with the value vectors attention writes")
    for ax in (ax_h, ax_a, ax_e, ax_v):
        plane_axes(ax, b.limits, b.plane)
    if b.note:
        footnote(fig, b.note)
    fig.suptitle(f"Output landscape summary: {b.title}", fontsize=8)
    return fig
