"""The value arrows of many held-out predictions (supplementary): where each prediction's
residual starts, what attention adds, where it lands."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tasks.windows import evenly_spaced
from . import compute as C
from . import style
from .context import FigureContext
from .panels import (
    argmax_image,
    new_figure,
    finish,
    plane_axes,
    styled,
)


@dataclass
class ValueArrows:
    vocab: list[str]
    colors: list[str]
    start: np.ndarray  # (R, 2) e at the predicting position
    moved: np.ndarray  # (R, 2) Attn(e) there
    end: np.ndarray  # (R, 2) z = e + Attn(e)
    targets: np.ndarray  # (R,) the rule's forced target, -1 where several are allowed
    correct: np.ndarray  # (R,) bool: the model's top prediction is allowed
    land: C.Landscape | None
    plane: C.Plane
    limits: tuple
    note: str
    title: str


def compute_value_arrows(ctx: FigureContext, n: int = 160) -> ValueArrows:
    """At `n` held-out predictions the rule constrains (evenly spaced over the held-out set):
    the residual before the last block's attention, what attention adds, the sum, and whether
    the model's guess is right. Windows longer than 64 tokens are fewer, n x 64 tokens in all
    (at least 32 of them): each is a forward pass of the whole context (the title counts them)."""
    n = min(n, max(32, n * 64 // ctx.rule_windows[0].shape[1]))
    keep = evenly_spaced(len(ctx.rule_windows[0]), n)
    inputs, index, targets, allowed = (a[keep] for a in ctx.rule_windows)
    b = f"blocks.{ctx.cfg.n_layers - 1}."
    names = (b + "hook_resid_pre", b + "hook_attn_out")
    if not ctx.cfg.parallel_attn_mlp:  # a parallel block's stream never holds e + Attn(e)
        names += (b + ("hook_resid_post" if ctx.cfg.attn_only else "hook_resid_mid"),)
    # A few windows per pass, keeping only each window's prediction: every activation of 160
    # windows at once would be the largest thing a large model's figures make.
    step = C.rows_per_pass(ctx.cfg, inputs.shape[1])
    parts, guesses = {name: [] for name in names}, []
    for start in range(0, len(inputs), step):
        logits, cache = ctx.model.run_with_cache(inputs[start : start + step])
        rows, at = np.arange(len(logits)), index[start : start + step]
        for name in names:
            parts[name].append(cache[name][rows, at])
        guesses.append(logits[rows, at].argmax(-1))
    e, moved, *z = (np.concatenate(parts[name]) for name in names)
    z = z[0] if z else e + moved
    correct = allowed[np.arange(len(inputs)), np.concatenate(guesses)]
    if ctx.cfg.d_model == 2:
        plane = ctx.embeddings.plane
        limits = C.square_limits(plane.project(e), plane.project(z))
        try:
            land = C.landscape(ctx.model, limits, ctx.resolution)  # its own grid: these limits
        except C.NotApplicable:  # a parallel block: no output network of z to draw under it
            land = None
    else:
        plane, land = C.fit_plane(np.concatenate([e, z])), None
        limits = C.square_limits(plane.project(e), plane.project(z))
    from .landscape import landscape_note

    return ValueArrows(
        ctx.classes,
        ctx.class_colors,
        plane.project(e),
        moved @ plane.axes.T,  # a displacement: no centring
        plane.project(z),
        targets,
        correct,
        land,
        plane,
        limits,
        landscape_note(ctx),
        ctx.title,
    )


@styled
def draw_value_arrows(data: ValueArrows, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 2.75, fig)
    axes = fig.subplots(1, 3)
    colors = [data.colors[t] if t >= 0 else style.MASKED_COLOR for t in data.targets]
    ax = axes[0]
    ax.scatter(*data.start.T, c=colors, s=8, edgecolors="none", zorder=3)
    ax.set_title(
        f"(a) original: e at the prediction\n{len(data.start)} predictions, "
        f"{int((~data.correct).sum())} wrong"
    )
    ax = axes[1]
    origin = np.zeros_like(data.moved)
    ax.quiver(
        *origin.T,
        *data.moved.T,
        color=colors,
        angles="xy",
        scale_units="xy",
        scale=1,
        width=0.004,
        alpha=0.7,
        zorder=3,
    )
    ax.set_title("(b) transformed: Attn(e) from 0")
    ax = axes[2]
    if data.land is not None:
        arrows = np.stack([data.start, data.end], 1)  # the names stay off the arrows too
        argmax_image(ax, data.land, data.colors, alpha=0.3, vocab=data.vocab, keep_clear=arrows)
    ax.quiver(
        *data.start.T,
        *(data.end - data.start).T,
        color=colors,
        angles="xy",
        scale_units="xy",
        scale=1,
        width=0.003,
        alpha=0.5,
        zorder=3,
    )
    ok = data.correct
    ax.scatter(
        *data.end[ok].T,
        s=10,
        c=style.CORRECT_COLOR,
        marker="o",
        edgecolors="white",
        linewidths=0.3,
        zorder=4,
    )
    ax.scatter(*data.end[~ok].T, s=18, c=style.WRONG_COLOR, marker="x", linewidths=0.9, zorder=5)
    ax.set_title(f"(c) z = e + Attn(e)\nright ● {ok.sum()}, wrong ✗ {(~ok).sum()}")
    moved_limits = C.square_limits(origin, data.moved)
    start_limits = C.fitted_limits(data.start)
    for a, lim in zip(axes, (start_limits, moved_limits, data.limits)):
        plane_axes(a, lim, data.plane)
    return finish(
        fig,
        data.note,
        f"Value arrows at {len(data.targets)} held-out constrained predictions "
        f"(colour: the rule's target): {data.title}",
        fontsize=8,
    )
