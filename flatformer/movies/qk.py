"""Movies of the query/key space: one query's scores over the key plane (movie 4) and the full
score matrix of every pair of points (movie 5), each beside the joint Q/K panel."""

from __future__ import annotations

import numpy as np

from ..figures import compute as C
from ..figures import style
from .draw import Frame, labels, square_panel
from .scene import Geometry, Scene

FIELD_RESOLUTION = 120


class QKSpace:
    """The joint query/key panel shared by movies 4 and 5: every query (blue) and key (red)."""

    def __init__(self, geo: Geometry):
        h, plane = geo.head, geo.qk_plane
        self.geo = geo
        self.q = geo.stack(lambda i: plane.project(geo.proj[i].q[:, :, h]).reshape(-1, 2))
        self.k = geo.stack(lambda i: plane.project(geo.proj[i].k[:, :, h]).reshape(-1, 2))
        self.limits = C.square_limits(self.q, self.k)

    def draw(self, ax, canvas: Frame):
        g = self.geo
        xl, yl = g.qk_plane.axis_labels()
        square_panel(ax, self.limits, f"Q/K space{g.head_note()}", xl, yl)
        self.k_labels = labels(ax, g.point_texts, style.KEY_COLOR)
        self.q_labels = labels(ax, g.point_texts, style.QUERY_COLOR)
        canvas.animate(self.k_labels, self.q_labels)
        ax.text(
            0.0,
            1.01,
            "queries",
            color=style.QUERY_COLOR,
            transform=ax.transAxes,
            fontsize=9,
            va="bottom",
            ha="left",
        )
        ax.text(
            1.0,
            1.01,
            "keys",
            color=style.KEY_COLOR,
            transform=ax.transAxes,
            fontsize=9,
            va="bottom",
            ha="right",
        )

    def move(self, i):
        self.q_labels.set_offsets(self.q[i])
        self.k_labels.set_offsets(self.k[i])


class QKSpaceMovie(Scene):
    """Movie 4: the joint Q/K space, and one query (the focus token two thirds into the
    context) against every key: the plane shaded by q . k / sqrt(d_head), keys the causal mask
    hides in gray (the paper's Fig 7)."""

    name = "mov4_qk_space"
    width, height, n_panels = 1024, 624, 2
    wspace = 0.3

    def __init__(self, geo):
        super().__init__(geo)
        self.qk = QKSpace(geo)
        task = geo.task
        self.focus = C.focus_token(task) if task.focus in task.vocab else geo.V - 1
        self.position = C.default_focus_position(geo.T)
        self.query = self.qk.q[:, self.focus * geo.T + self.position]  # (F, 2)
        h = geo.head
        self.fields = geo.stack(
            lambda i: C.qk_field(
                geo.proj[i].q[self.focus, self.position, h],
                geo.qk_plane,
                self.qk.limits,
                FIELD_RESOLUTION,
            ).values.astype(np.float32)
        )
        # Colours span the scores this query actually gives keys over the movie, not the
        # field's corners (a linear field is largest there, far from every key).
        row = geo.stack(lambda i: C.point_scores(geo.proj[i], h)[self.focus, self.position])
        self.clim = float(np.nanmax(np.abs(row))) or 1.0
        hidden = np.tile(np.arange(geo.T) > self.position, geo.V)
        self.key_colors = np.where(hidden, style.MASKED_COLOR, geo.point_colors)

    def frame(self, i):
        return {
            "q": self.qk.q[i],
            "k": self.qk.k[i],
            "field": self.fields[i],
            "query": self.query[i],
        }

    def draw(self, panels):
        g = self.geo
        self.qk.draw(panels[0], self.canvas)
        ax = panels[1]
        label = style.point_text(g.vocab[self.focus], self.position)
        xl, yl = g.qk_plane.axis_labels()
        square_panel(
            ax,
            self.qk.limits,
            f"query {label} (star): q . k / sqrt(d_head)\n"
            f"keys at positions > {self.position} are masked (gray)",
            xl,
            yl,
        )
        from matplotlib import colormaps

        self.field = ax.imshow(
            np.zeros((2, 2)),
            origin="lower",
            extent=self.qk.limits,
            zorder=0,
            cmap=colormaps[style.DIVERGING],
            vmin=-self.clim,
            vmax=self.clim,
        )
        cbar = ax.figure.colorbar(self.field, ax=ax, fraction=0.046, pad=0.03)
        cbar.ax.tick_params(labelsize=7)
        self.keys = labels(ax, g.point_texts, self.key_colors)
        (self.query_mark,) = ax.plot(
            [],
            [],
            marker="*",
            ms=14,
            color=style.QUERY_COLOR,
            mec="white",
            mew=0.8,
            zorder=4,
            ls="none",
        )
        self.canvas.animate(self.field, *ax.spines.values(), self.keys, self.query_mark)

    def move(self, i, a):
        self.qk.move(i)
        self.field.set_data(a["field"])
        self.keys.set_offsets(a["k"])
        self.query_mark.set_data([a["query"][0]], [a["query"][1]])


class QKAttentionMovie(Scene):
    """Movie 5: the joint Q/K space beside the full pre-softmax score matrix of every query
    point against every key point (V*T x V*T, token blocks of T x T, the causal mask gray)."""

    name = "mov5_qk_attention"
    width, height, n_panels = 1024, 624, 2
    wspace = 0.3

    def __init__(self, geo):
        super().__init__(geo)
        self.qk = QKSpace(geo)
        n = geo.V * geo.T
        self.scores = geo.stack(
            lambda i: C.point_scores(geo.proj[i], geo.head).reshape(n, n).astype(np.float32)
        )
        self.clim = float(np.nanmax(np.abs(self.scores))) or 1.0

    def frame(self, i):
        return {"q": self.qk.q[i], "k": self.qk.k[i], "scores": self.scores[i]}

    def draw(self, panels):
        g = self.geo
        self.qk.draw(panels[0], self.canvas)
        ax = panels[1]
        from matplotlib import colormaps

        cmap = colormaps[style.DIVERGING].with_extremes(bad=style.MASKED_COLOR)
        n = g.V * g.T
        self.matrix = ax.imshow(
            np.zeros((n, n)),
            cmap=cmap,
            vmin=-self.clim,
            vmax=self.clim,
            interpolation="nearest",
            zorder=0,
        )
        cbar = ax.figure.colorbar(self.matrix, ax=ax, fraction=0.046, pad=0.03)
        cbar.ax.tick_params(labelsize=7)
        lines = []
        for b in range(1, g.V):
            lines.append(ax.axhline(b * g.T - 0.5, color="white", lw=0.6))
            lines.append(ax.axvline(b * g.T - 0.5, color="white", lw=0.6))
        centres = np.arange(g.V) * g.T + (g.T - 1) / 2
        ax.set_xticks(centres, g.vocab, fontsize=7)
        ax.set_yticks(centres, g.vocab, fontsize=7)
        for tick, color in zip(ax.get_xticklabels() + ax.get_yticklabels(), g.colors * 2):
            tick.set_color(color)
        ax.set_xlabel(f"key token (positions 0..{g.T - 1} within each block)", fontsize=8)
        ax.set_ylabel("query token", fontsize=8)
        ax.set_title(f"q . k / sqrt(d_head) for every pair of points{g.head_note()}", fontsize=10)
        self.canvas.animate(self.matrix, *lines, *ax.spines.values())

    def move(self, i, a):
        self.qk.move(i)
        self.matrix.set_data(a["scores"])
