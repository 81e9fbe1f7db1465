"""Figures of a many-seed comparison: aligned embedding planes and output landscapes of every
seed, the final rule errors, and which structures hold in which seeds.

Each draw function takes a `Comparison` (and the arrays report.py computes from it) and
returns a matplotlib Figure; nothing is saved here (the `compare` command saves).
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Circle, Patch

from ..figures import style
from ..figures.panels import argmax_image, footnote, new_figure, plane_axes, styled
from ..readout import fit_plane, square_limits
from .measures import Comparison
from .report import ORDERS, STRUCTURES, AlignedLandscape, panel_limits, structure_label


def _grid(c: Comparison, fig):
    """Square-ish grid of one small panel per seed (a page wide for many seeds, narrower for
    a few, so a handful of panels do not drift apart)."""
    S = len(c.seeds)
    ncols = max(1, math.ceil(math.sqrt(S)))
    nrows = math.ceil(S / ncols)
    panel = min(style.PAGE_WIDTH / ncols, 1.6)
    width, height = max(panel * ncols, 4.2), panel * nrows * 1.08 + 0.9
    if fig is None:
        # Fixed margins instead of the constrained layout: solving it for 64 panels doubled
        # the drawing time. Room above for the legend, below for the footnote.
        fig = Figure(figsize=(width, height))
        FigureCanvasAgg(fig)
    fig.subplots_adjust(
        left=0.1 / width,
        right=1 - 0.1 / width,
        top=1 - 0.35 / height,
        bottom=0.5 / height,
        wspace=0.08,
        hspace=0.22,
    )
    axes = np.atleast_1d(fig.subplots(nrows, ncols)).ravel()
    for ax in axes[S:]:
        ax.axis("off")
    return fig, axes[:S]


def _note(fig, text: str):
    """A footnote wrapped to the figure's width (about 22 characters of 5.5 pt per inch)."""
    footnote(fig, textwrap.fill(" ".join(text.split()), width=int(fig.get_figwidth() * 22)))


def _title(ax, c: Comparison, s: int):
    ref = " (ref)" if s == c.reference else ""
    colour = "black" if c.successful[s] else style.WRONG_COLOR
    ax.set_title(
        f"seed {c.seeds[s]}{ref}: {c.rule_error[s]:.1%}", fontsize=5, pad=1.5, color=colour
    )


def _legend(fig, c: Comparison, colors):
    handles = [Patch(color=col, label=tok) for tok, col in zip(c.vocab, colors)]
    fig.legend(
        handles=handles,
        loc="upper center",
        ncol=min(len(handles), 14),
        fontsize=5.5,
        frameon=False,
        handlelength=1.0,
        columnspacing=0.8,
    )


@styled
def draw_embedding_grid(c: Comparison, fig=None):
    """Every seed's token + position points x_v + p_t, mapped into the reference seed's frame."""
    fig, axes = _grid(c, fig)
    colors = style.token_colors(c.vocab, c.task.focus)
    point_colors = np.repeat(np.array(colors, dtype=object), c.points.shape[2])
    # Wider streams are drawn on the reference seed's two principal axes (identity in 2-D).
    plane = fit_plane(c.points[c.reference])
    for s, ax in enumerate(axes):
        xy = plane.project(c.points[s]).reshape(-1, 2)
        ax.scatter(xy[:, 0], xy[:, 1], s=2.5, c=list(point_colors), edgecolors="none")
        plane_axes(
            ax,
            panel_limits(c, s, zones=False) if plane.is_identity else square_limits(xy),
            ticks=False,
        )
        _title(ax, c, s)
    _legend(fig, c, colors)
    where = (
        "the plane"
        if plane.is_identity
        else (
            f"the reference seed's first two principal axes ({plane.explained.sum():.0%} of its "
            f"variance)"
        )
    )
    _note(
        fig,
        f"token + position points of every seed at step {c.step}, mapped onto seed "
        f"{c.seeds[c.reference]} by an orthogonal map (Procrustes, reflections allowed); "
        f"{where}; each panel its own scale; vermilion titles: rule error > {c.success:.0%}",
    )
    return fig


@styled
def draw_landscape_grid(c: Comparison, lands: list[AlignedLandscape], fig=None):
    """Every seed's output argmax map in the reference frame, with its points, its answers'
    mean z points (white-edged) and the circle the zone order is read along (dashed)."""
    fig, axes = _grid(c, fig)
    colors = style.token_colors(c.vocab, c.task.focus)
    for s, (ax, land) in enumerate(zip(axes, lands)):
        argmax_image(ax, land, colors, zone_labels=False)
        xy = c.points[s].reshape(-1, 2)
        ax.scatter(xy[:, 0], xy[:, 1], s=0.8, c="white", edgecolors="none", alpha=0.8)
        if c.z_targets is not None:
            z = c.z_targets[s]
            ax.scatter(
                z[:, 0],
                z[:, 1],
                s=7,
                c=[colors[t] for t in c.targets],
                edgecolors="white",
                linewidths=0.5,
                zorder=3,
            )
            ax.add_patch(
                Circle(
                    c.zone_centre[s], c.zone_radius[s], fill=False, lw=0.5, ls="--", color="white"
                )
            )
        plane_axes(ax, land.extent, ticks=False)
        _title(ax, c, s)
    _legend(fig, c, colors)
    _note(
        fig,
        f"argmax of each seed's output network over the plane, in seed "
        f"{c.seeds[c.reference]}'s frame; white dots: token + position points; "
        f"ringed: the mean z point of each answer (in its zone's colour); dashed: the circle "
        f"the zones' order is read along",
    )
    return fig


@styled
def draw_rule_errors(c: Comparison, fig=None):
    """Histogram of the seeds' final rule errors on a log scale (one error in the held-out set
    is 1 / n_positions; the first bin holds the seeds with none), with the success threshold."""
    fig = new_figure(style.COLUMN_WIDTH, 2.2, fig)
    ax = fig.subplots()
    errors = 100 * c.rule_error
    zero = 50 / max(c.n_positions, 1)  # half of one error, in percent
    bins = np.concatenate([[0.0], np.geomspace(zero, 100, 25)])
    ax.hist(
        np.clip(errors, 0, 100),
        bins=bins,
        color=style.QUERY_COLOR,
        edgecolor="white",
        linewidth=0.4,
    )
    ax.set_xscale("symlog", linthresh=zero, linscale=0.4)
    ax.set_xlim(0, 100)
    ax.axvline(100 * c.success, color=style.WRONG_COLOR, lw=0.8, ls="--")
    ticks = [t for t in (0, 0.1, 1, 10, 100) if t == 0 or t > zero]
    ax.set_xticks(ticks, [f"{t:g}%" for t in ticks])
    ax.set_xlabel(f"final rule error ({c.n_positions} held-out positions)")
    ax.set_ylabel("seeds")
    ax.set_title(
        f"{int(c.successful.sum())} of {len(c.seeds)} seeds at rule error <= "
        f"{c.success:.0%} (dashed), step {c.step}"
    )
    return fig


def structure_matrix(c: Comparison) -> tuple[list[str], np.ndarray]:
    """Row labels and a (rows, S) boolean matrix: first whether the seed learned the task, then
    each structure, then for each order whether the seed has the successful seeds' most common
    one."""
    labels, rows = [f"learned (rule error <= {c.success:.0%})"], [c.successful]
    for key, _ in STRUCTURES:
        if key in c.measures:
            labels.append(structure_label(c, key))
            rows.append(np.asarray(c.measures[key], dtype=bool))
    for key, _ in ORDERS:
        orders = getattr(c, key)
        if all(order is None for order in orders):
            continue
        top = Counter(orders[i] for i in np.flatnonzero(c.successful)).most_common(1)
        top = top[0][0] if top else None
        labels.append(f"{structure_label(c, key)} is {c.order_text(top)} (the most common)")
        rows.append(np.array([order == top for order in orders]))
    return labels, np.array(rows)


@styled
def draw_invariants(c: Comparison, fig=None):
    """Which structure holds in which seed (green holds, orange does not), and per row how many
    of the successful seeds have it."""
    labels, matrix = structure_matrix(c)
    S = len(c.seeds)
    fig = new_figure(style.PAGE_WIDTH, 0.9 + 0.2 * len(labels), fig)
    ax = fig.subplots()
    lut = ListedColormap([style.WRONG_COLOR, style.CORRECT_COLOR])
    ax.imshow(matrix.astype(int), cmap=lut, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    ok = c.successful
    counts = [f"{int(row[ok].sum())}/{int(ok.sum())}" for row in matrix]
    counts[0] = f"{int(ok.sum())}/{S}"
    ax.set_yticks(
        range(len(labels)), [f"{lab}  [{n}]" for lab, n in zip(labels, counts)], fontsize=5.5
    )
    step = max(1, S // 32)
    ax.set_xticks(
        range(0, S, step), [str(c.seeds[i]) for i in range(0, S, step)], fontsize=style.MIN_FONT
    )
    ax.set_xlabel("seed")
    ax.set_xticks(np.arange(-0.5, S), minor=True)
    ax.set_yticks(np.arange(-0.5, len(labels)), minor=True)
    ax.grid(which="minor", color="white", lw=0.4)
    ax.tick_params(which="minor", length=0)
    # A figure title, not the axes': left-aligned over the axes, it ran past the canvas edge.
    fig.suptitle(
        "Structures per seed (green: holds); [k/n]: successful seeds that have it", fontsize=8
    )
    return fig
