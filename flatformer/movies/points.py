"""Movies of the points: the embeddings (movie 1) and the combined points' queries, keys and
values (movie 3)."""

from __future__ import annotations

from ..figures import compute as C
from ..figures import style
from .draw import GlyphText, labels, square_panel
from .scene import Scene


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
        return {"token": self.token[i], "position": self.position[i], "combined": self.combined[i]}

    def draw(self, panels):
        g = self.geo
        titles = ["token embeddings x", "position embeddings p", "combined e = x + p"]
        planes = [g.token_plane, g.position_plane, g.plane]
        for ax, lim, title, plane in zip(panels, self.limits, titles, planes):
            xl, yl = plane.axis_labels()
            square_panel(ax, lim, title, xl, yl)
        self.token_labels = labels(panels[0], g.vocab, g.colors, size=9)
        (self.ladder,) = panels[1].plot([], [], color="0.7", lw=1, zorder=1)
        self.position_labels = labels(panels[1], [f"p{t}" for t in range(g.T)], "0.2", size=9)
        self.combined_labels = labels(panels[2], g.point_texts, g.point_colors)
        self.canvas.animate(
            self.token_labels, self.ladder, self.position_labels, self.combined_labels
        )

    def move(self, i, a):
        self.token_labels.set_offsets(a["token"])
        self.ladder.set_data(a["position"][:, 0], a["position"][:, 1])
        self.position_labels.set_offsets(a["position"])
        self.combined_labels.set_offsets(a["combined"])


class QKVMovie(Scene):
    """Movie 3: the combined points and their queries, keys and values (the paper's Fig 6)."""

    name = "mov3_qkv"
    width, height, n_panels = 1440, 528, 4

    def __init__(self, geo):
        super().__init__(geo)
        h = geo.head
        self.points = {"e": geo.stack(lambda i: geo.emb[i].combined_2d.reshape(-1, 2))}
        for w in "qkv":
            self.points[w] = geo.stack(
                lambda i: geo.planes[w].project(getattr(geo.proj[i], w)[:, :, h]).reshape(-1, 2)
            )
        self.limits = {w: C.square_limits(p) for w, p in self.points.items()}
        cfg = self.ck.run.cfg
        # The 2 x 2 matrices are worth printing only when they are the whole story.
        self.show_weights = (
            cfg.d_model == 2
            and cfg.d_head == 2
            and cfg.normalization == "none"
            and cfg.positional_embedding_type == "standard"
        )

    def frame(self, i):
        return {w: p[i] for w, p in self.points.items()}

    def draw(self, panels):
        g = self.geo
        note = g.head_note()
        spec = [
            ("e", "combined e = x + p", None, g.plane),
            ("q", f"queries {g.formula('q')}{note}", style.QUERY_COLOR, g.planes["q"]),
            ("k", f"keys {g.formula('k')}{note}", style.KEY_COLOR, g.planes["k"]),
            ("v", f"values {g.formula('v')}{note}", style.VALUE_COLOR, g.planes["v"]),
        ]
        self.labels, self.weights = {}, {}
        for ax, (w, title, color, plane) in zip(panels, spec):
            xl, yl = plane.axis_labels()
            square_panel(ax, self.limits[w], title, xl, yl, color)
            self.labels[w] = labels(ax, g.point_texts, g.point_colors)
            self.canvas.animate(self.labels[w])
            if w != "e" and self.show_weights:
                # Under the panel, not in it, so the matrix never hides a point.
                ax.set_xlabel("")
                self.weights[w] = self.canvas.animate(
                    ax.figure.add_artist(
                        GlyphText(ax.figure, 0.5, -0.14, ax.transAxes, 8, color, family="monospace")
                    )
                )

    def move(self, i, a):
        for w, coll in self.labels.items():
            coll.set_offsets(a[w])
        for w, text in self.weights.items():
            W = C.head_weight(self.ck.models[i], w.upper(), self.geo.head)
            text.set_text(
                f"W_{w.upper()} = [[{W[0, 0]:+.2f} {W[0, 1]:+.2f}] [{W[1, 0]:+.2f} {W[1, 1]:+.2f}]]"
            )
