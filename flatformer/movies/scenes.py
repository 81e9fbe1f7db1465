"""The five movies of the paper, one scene each, and modular-addition's spectrum movie:
compute every frame's arrays, then draw.

A scene computes its arrays for all frames when it is made (`frame(i)` returns frame i's), fixes
its axis limits and colour ranges over the whole movie, builds its figure once (`build`) and then
only moves artists (`update(i)`). The numbers come from the numeric layer the figures read too
(`flatformer.readout`, through `figures.compute`), so a frame at step s shows what the figures
show at step s.

For d_model > 2 (or d_head > 2) points are drawn in a PCA plane, as in the figures, but one
plane per movie: fitted to the last checkpoint and used for every frame, so the axes mean the
same thing in every frame. The output landscape exists only when d_model == 2.
"""

from __future__ import annotations

import math

import numpy as np

from ..figures import compute as C
from ..figures import style
from .draw import Frame, GlyphText, labels, square_panel
from .frames import Checkpoints, caption

LANDSCAPE_RESOLUTION = 160
FIELD_RESOLUTION = 120


class Geometry:
    """Every checkpoint's points (embeddings, Q/K/V of all V x T combined points), computed once
    and shared by the scenes, with the drawing planes of the last checkpoint."""

    def __init__(self, ck: Checkpoints, head: int = 0):
        cfg = ck.run.cfg
        if not 0 <= head < cfg.n_heads:
            from ..errors import FlatformerError
            raise FlatformerError(f"--head {head} does not exist: the model has {cfg.n_heads} "
                                  f"head{'s' if cfg.n_heads > 1 else ''} (0..{cfg.n_heads - 1})")
        self.ck, self.head = ck, head
        self.vocab = list(ck.run.vocab)
        self.task = ck.run.task
        self.V, self.T = cfg.d_vocab, cfg.n_ctx
        self.colors = style.token_colors(self.vocab, self.task.focus or None)
        final = C.embeddings(ck.models[-1], self.vocab)
        final_proj = C.projections(ck.models[-1])
        self.plane = final.plane
        self.token_plane, self.position_plane = final.token_plane, final.position_plane
        self.planes = {w: final_proj.plane(w, head) for w in "qkv"}
        self.qk_plane = final_proj.qk_plane(head)
        self.emb = [C.embeddings(m, self.vocab, plane=self.plane) for m in ck.models]
        self.proj = [C.projections(m) for m in ck.models]
        self.point_texts = [style.point_text(self.vocab[v], t)
                            for v in range(self.V) for t in range(self.T)]
        self.point_colors = np.repeat(np.array(self.colors), self.T)

    def stack(self, fn) -> np.ndarray:
        """fn(frame index) -> array, for every frame, stacked on a leading frame axis."""
        return np.stack([fn(i) for i in range(len(self.ck))])

    @property
    def projected(self) -> bool:
        """Whether any space is drawn through a PCA plane (d_model > 2 or d_head > 2)."""
        planes = [self.plane, self.token_plane, self.position_plane, self.qk_plane,
                  *self.planes.values()]
        return not all(p.is_identity for p in planes)

    def plane_note(self) -> str:
        """The footnote of frames drawn through PCA planes: which planes, fixed for the movie."""
        if not self.projected:
            return ""
        return (f"points drawn in PCA planes of step {self.ck.steps[-1]:,} (the last checkpoint),"
                f"\nthe same planes in every frame")

    def head_note(self) -> str:
        return f", head {self.head}" if self.ck.run.cfg.n_heads > 1 else ""

    def formula(self, w: str) -> str:
        """How block 0 makes its queries, keys or values from e, e.g. "q = LN(e) W_Q"."""
        cfg = self.ck.run.cfg
        source = "LN(e)" if cfg.normalization == "pre_ln" else "e"
        bias = f" + b_{w.upper()}" if cfg.qkv_bias else ""
        return f"{w} = {source} W_{w.upper()}{bias}"


class Scene:
    """One movie: `frame(i)` arrays, `build()` the figure, `update(i)` move its artists."""

    name = ""
    task: str | None = None     # the only task whose runs can have this movie (None: any)
    width, height, n_panels = 1280, 560, 3
    wspace = 0.22

    def __init__(self, geo: Geometry):
        self.geo, self.ck = geo, geo.ck
        self.canvas: Frame | None = None

    def __len__(self) -> int:
        return len(self.ck)

    def frame(self, i: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def build(self) -> Frame:
        self.canvas = Frame(self.width, self.height, self.n_panels, self.ck.steps, self.ck.loss,
                            self.ck.rule_error, wspace=self.wspace)
        if self.note():
            self.canvas.fig.text(6 / self.width, 1 - 8 / self.height, self.note(),
                                 fontsize=7, color="0.35", va="top", ha="left")
        self.draw(self.canvas.panels)
        return self.canvas

    def draw(self, panels):
        raise NotImplementedError

    def note(self) -> str:
        """A footnote in the frame's top-left corner, drawn once."""
        return self.geo.plane_note()

    def update(self, i: int):
        if self.canvas is None:
            self.build()
        self.canvas.update(i, caption(self.ck, i))
        self.move(i, self.frame(i))

    def move(self, i: int, arrays: dict):
        raise NotImplementedError

    def render(self, i: int) -> np.ndarray:
        """Frame i as (H, W, 4) uint8 RGBA."""
        self.update(i)
        return self.canvas.rgba()


class EmbeddingsMovie(Scene):
    """Movie 1: token x, position p and combined e = x + p points, the paper's Fig 5 scatters."""

    name = "mov1_embeddings"

    def __init__(self, geo):
        super().__init__(geo)
        self.token = geo.stack(lambda i: geo.token_plane.project(geo.emb[i].token))
        self.position = geo.stack(lambda i: geo.position_plane.project(geo.emb[i].position))
        self.combined = geo.stack(lambda i: geo.emb[i].combined_2d.reshape(-1, 2))
        self.limits = [C.square_limits(a) for a in (self.token, self.position, self.combined)]

    def frame(self, i):
        return {"token": self.token[i], "position": self.position[i],
                "combined": self.combined[i]}

    def draw(self, panels):
        g = self.geo
        titles = ["token embeddings x", "position embeddings p", "combined e = x + p"]
        planes = [g.token_plane, g.position_plane, g.plane]
        for ax, lim, title, plane in zip(panels, self.limits, titles, planes):
            xl, yl = plane.axis_labels()
            square_panel(ax, lim, title, xl, yl)
        self.token_labels = labels(panels[0], g.vocab, g.colors, size=9)
        self.ladder, = panels[1].plot([], [], color="0.7", lw=1, zorder=1)
        self.position_labels = labels(panels[1], [f"p{t}" for t in range(g.T)], "0.2", size=9)
        self.combined_labels = labels(panels[2], g.point_texts, g.point_colors)
        self.canvas.animate(self.token_labels, self.ladder, self.position_labels,
                            self.combined_labels)

    def move(self, i, a):
        self.token_labels.set_offsets(a["token"])
        self.ladder.set_data(a["position"][:, 0], a["position"][:, 1])
        self.position_labels.set_offsets(a["position"])
        self.combined_labels.set_offsets(a["combined"])


def landscape_rgb(land: C.Landscape, colors) -> np.ndarray:
    """The argmax map as an image: each cell in its winning token's colour, paler where the
    model is less sure (white at a uniform guess), so zones and their confidence both show."""
    from matplotlib.colors import to_rgb
    rgb = np.array([to_rgb(c) for c in colors])
    V = len(colors)
    top = land.probs.max(-1)
    conf = np.clip((top - 1 / V) / (1 - 1 / V), 0, 1)
    alpha = (0.25 + 0.5 * conf)[..., None]
    return 1 - alpha * (1 - rgb[land.argmax])


class LandscapeMovie(Scene):
    """Movie 2: the output landscape (last block's MLP + residual + unembedding over the plane)
    as its argmax map with the combined embeddings and with the values, and its entropy."""

    name = "mov2_landscape"

    def __init__(self, geo):
        super().__init__(geo)
        C.require_plane(self.ck.models[0], "the landscape movie")
        h = geo.head
        self.combined = geo.stack(lambda i: geo.emb[i].combined.reshape(-1, 2))
        self.values = geo.stack(lambda i: geo.proj[i].written[:, :, h].reshape(-1, 2))
        self.limits = C.square_limits(self.combined, self.values)

    def note(self):
        layers = self.ck.run.cfg.n_layers
        if layers == 1:
            return ""
        return (f"the map is block {layers - 1}'s MLP + residual + unembedding;\n"
                f"e and the values are block 0's")

    def frame(self, i):
        land = C.landscape(self.ck.models[i], self.limits, LANDSCAPE_RESOLUTION)
        return {"combined": self.combined[i], "values": self.values[i],
                "argmax_rgb": landscape_rgb(land, self.geo.colors), "argmax": land.argmax,
                "entropy": land.entropy}

    def draw(self, panels):
        g = self.geo
        blank = np.ones((2, 2, 3))
        titles = ["argmax next token, with e = x + p", f"argmax, with values{g.head_note()}",
                  "entropy of the next token (nats)"]
        self.images = []
        for ax, title in zip(panels, titles):
            square_panel(ax, self.limits, title, "", "dim 2" if ax is panels[0] else "")
            self.images.append(ax.imshow(blank, origin="lower", extent=self.limits,
                                         interpolation="nearest", zorder=0))
        from matplotlib import colormaps
        from matplotlib.patches import Patch
        self.images[2].set_cmap(colormaps[style.SEQUENTIAL])
        self.images[2].set_clim(0, math.log(g.V))
        self.images[2].set_data(np.zeros((2, 2)))
        cbar = panels[2].figure.colorbar(self.images[2], ax=panels[2], fraction=0.046, pad=0.03)
        cbar.ax.tick_params(labelsize=7)
        # The colour key of the argmax maps, drawn once (static).
        panels[1].legend([Patch(color=c) for c in g.colors], g.vocab, ncol=len(g.vocab),
                         loc="upper center", bbox_to_anchor=(0.5, -0.07), fontsize=8,
                         frameon=False, handlelength=1.0, handletextpad=0.3, columnspacing=0.9)
        self.point_labels = labels(panels[0], g.point_texts, g.point_colors)
        self.value_labels = labels(panels[1], g.point_texts, g.point_colors)
        # Images cover the inner half of the spines, so the spines are redrawn over them.
        spines = [s for ax in panels for s in ax.spines.values()]
        self.canvas.animate(*self.images, *spines, self.point_labels, self.value_labels)

    def move(self, i, a):
        self.images[0].set_data(a["argmax_rgb"])
        self.images[1].set_data(a["argmax_rgb"])
        self.images[2].set_data(a["entropy"])
        self.point_labels.set_offsets(a["combined"])
        self.value_labels.set_offsets(a["values"])


class QKVMovie(Scene):
    """Movie 3: the combined points and their queries, keys and values (the paper's Fig 6)."""

    name = "mov3_qkv"
    width, height, n_panels = 1440, 528, 4

    def __init__(self, geo):
        super().__init__(geo)
        h = geo.head
        self.points = {"e": geo.stack(lambda i: geo.emb[i].combined_2d.reshape(-1, 2))}
        for w in "qkv":
            self.points[w] = geo.stack(lambda i: geo.planes[w].project(
                getattr(geo.proj[i], w)[:, :, h]).reshape(-1, 2))
        self.limits = {w: C.square_limits(p) for w, p in self.points.items()}
        cfg = self.ck.run.cfg
        # The 2 x 2 matrices are worth printing only when they are the whole story.
        self.show_weights = cfg.d_model == 2 and cfg.d_head == 2 and cfg.normalization == "none"

    def frame(self, i):
        return {w: p[i] for w, p in self.points.items()}

    def draw(self, panels):
        g = self.geo
        note = g.head_note()
        spec = [("e", "combined e = x + p", None, g.plane),
                ("q", f"queries {g.formula('q')}{note}", style.QUERY_COLOR, g.planes["q"]),
                ("k", f"keys {g.formula('k')}{note}", style.KEY_COLOR, g.planes["k"]),
                ("v", f"values {g.formula('v')}{note}", style.VALUE_COLOR, g.planes["v"])]
        self.labels, self.weights = {}, {}
        for ax, (w, title, color, plane) in zip(panels, spec):
            xl, yl = plane.axis_labels()
            square_panel(ax, self.limits[w], title, xl, yl, color)
            self.labels[w] = labels(ax, g.point_texts, g.point_colors)
            self.canvas.animate(self.labels[w])
            if w != "e" and self.show_weights:
                # Under the panel, not in it, so the matrix never hides a point.
                ax.set_xlabel("")
                self.weights[w] = self.canvas.animate(ax.figure.add_artist(GlyphText(
                    ax.figure, 0.5, -0.14, ax.transAxes, 8, color, family="monospace")))

    def move(self, i, a):
        for w, coll in self.labels.items():
            coll.set_offsets(a[w])
        tensors = self.ck.models[i].tensors
        for w, text in self.weights.items():
            W = tensors[f"blocks.0.attn.W_{w.upper()}"][self.geo.head]
            text.set_text(f"W_{w.upper()} = [[{W[0, 0]:+.2f} {W[0, 1]:+.2f}] "
                          f"[{W[1, 0]:+.2f} {W[1, 1]:+.2f}]]")


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
        ax.text(0.0, 1.01, "queries", color=style.QUERY_COLOR, transform=ax.transAxes,
                fontsize=9, va="bottom", ha="left")
        ax.text(1.0, 1.01, "keys", color=style.KEY_COLOR, transform=ax.transAxes,
                fontsize=9, va="bottom", ha="right")

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
        self.focus = C.focus_token(task) if task.focus in geo.vocab else geo.V - 1
        self.position = C.default_focus_position(geo.T)
        self.query = self.qk.q[:, self.focus * geo.T + self.position]          # (F, 2)
        h = geo.head
        self.fields = geo.stack(lambda i: C.qk_field(
            geo.proj[i].q[self.focus, self.position, h], geo.qk_plane, self.qk.limits,
            FIELD_RESOLUTION).values.astype(np.float32))
        # Colours span the scores this query actually gives keys over the movie, not the
        # field's corners (a linear field is largest there, far from every key).
        row = geo.stack(lambda i: C.point_scores(geo.proj[i], h)[self.focus, self.position])
        self.clim = float(np.nanmax(np.abs(row))) or 1.0
        hidden = np.tile(np.arange(geo.T) > self.position, geo.V)
        self.key_colors = np.where(hidden, style.MASKED_COLOR, geo.point_colors)

    def frame(self, i):
        return {"q": self.qk.q[i], "k": self.qk.k[i], "field": self.fields[i],
                "query": self.query[i]}

    def draw(self, panels):
        g = self.geo
        self.qk.draw(panels[0], self.canvas)
        ax = panels[1]
        label = style.point_text(g.vocab[self.focus], self.position)
        xl, yl = g.qk_plane.axis_labels()
        square_panel(ax, self.qk.limits, f"query {label} (star): q . k / sqrt(d_head)\n"
                     f"keys at positions > {self.position} are masked (gray)", xl, yl)
        from matplotlib import colormaps
        self.field = ax.imshow(np.zeros((2, 2)), origin="lower", extent=self.qk.limits,
                               zorder=0, cmap=colormaps[style.DIVERGING], vmin=-self.clim,
                               vmax=self.clim)
        cbar = ax.figure.colorbar(self.field, ax=ax, fraction=0.046, pad=0.03)
        cbar.ax.tick_params(labelsize=7)
        self.keys = labels(ax, g.point_texts, self.key_colors)
        self.query_mark, = ax.plot([], [], marker="*", ms=14, color=style.QUERY_COLOR,
                                   mec="white", mew=0.8, zorder=4, ls="none")
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
        self.scores = geo.stack(lambda i: C.point_scores(geo.proj[i], geo.head)
                                .reshape(n, n).astype(np.float32))
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
        self.matrix = ax.imshow(np.zeros((n, n)), cmap=cmap, vmin=-self.clim, vmax=self.clim,
                                interpolation="nearest", zorder=0)
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
        ax.set_title(f"q . k / sqrt(d_head) for every pair of points{g.head_note()}",
                     fontsize=10)
        self.canvas.animate(self.matrix, *lines, *ax.spines.values())

    def move(self, i, a):
        self.qk.move(i)
        self.matrix.set_data(a["scores"])


class SpectrumMovie(Scene):
    """Movie 6 (modular-addition only): the embedding's Fourier spectrum (Nanda et al. 2023),
    and the numbers in the plane of the strongest key frequency, where grokking draws its
    circle. Both from analysis/grokking.py; the key frequencies are the last checkpoint's."""

    name = "mov6_spectrum"
    task = "modular-addition"
    n_panels = 2

    def __init__(self, geo):
        from ..analysis import grokking as G
        super().__init__(geo)
        p = geo.task.p
        embeds = [m.tensors["embed.W_E"][:p] for m in self.ck.models]
        self.norms = np.array([G.spectrum(w) for w in embeds])
        final = self.ck.models[-1]
        self.keys = G.key_frequencies(final.tensors, p)
        self.top = max(self.keys, key=lambda k: self.norms[-1, k])
        plane = G.frequency_plane(embeds[-1], self.top)
        self.points = np.stack([(w - w.mean(0)) @ plane for w in embeds])
        self.limits = C.square_limits(self.points)
        self.hues = style.token_colors([str(i) for i in range(p)])

    def note(self):
        return f"red: key frequencies {self.keys}; plane fixed at the last checkpoint"

    def frame(self, i):
        return {"norms": self.norms[i], "points": self.points[i]}

    def draw(self, panels):
        ax, plane_ax = panels
        k = np.arange(self.norms.shape[1])
        colors = ["#C0392B" if f in self.keys else "0.6" for f in k]
        self.bars = ax.bar(k, self.norms[0], color=colors, width=0.8)
        ax.set_xlim(-0.8, k[-1] + 0.8)
        ax.set_ylim(0, 1.05 * self.norms.max())
        ax.set_title("embedding: norm of each frequency", fontsize=10)
        ax.set_xlabel("frequency k (0: constant)", fontsize=8)
        ax.tick_params(labelsize=7)
        square_panel(plane_ax, self.limits, f"numbers in the plane of frequency {self.top}")
        self.labels = labels(plane_ax, self.geo.vocab[:len(self.points[0])], self.hues)
        self.canvas.animate(*self.bars, self.labels)

    def move(self, i, a):
        for bar, height in zip(self.bars, a["norms"]):
            bar.set_height(height)
        self.labels.set_offsets(a["points"])


MOVIES = {cls.name: cls for cls in (EmbeddingsMovie, LandscapeMovie, QKVMovie, QKSpaceMovie,
                                    QKAttentionMovie)}
