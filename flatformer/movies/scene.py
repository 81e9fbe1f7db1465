"""What every movie shares: `Geometry`, each checkpoint's points computed once with the drawing
planes of the last checkpoint, and `Scene`, the compute-then-draw cycle of one movie.

A scene computes its arrays for all frames when it is made (`frame(i)` returns frame i's), fixes
its axis limits and colour ranges over the whole movie, builds its figure once (`build`) and then
only moves artists (`update(i)`). The numbers come from the numeric layer the figures read too
(`flatformer.readout`, through `figures.compute`), so a frame at step s shows what the figures
show at step s.

For d_model > 2 (or d_head > 2) points are drawn in a PCA plane, as in the figures, but one
plane per movie: fitted to the last checkpoint and used for every frame, so the axes mean the
same thing in every frame.
"""

from __future__ import annotations

import numpy as np

from ..readout.labels import labels as display_labels
from ..figures import compute as C
from ..figures import style
from .draw import Frame
from .frames import Checkpoints, caption


class Geometry:
    """Every checkpoint's points (embeddings, Q/K/V of all V x T combined points), computed once
    and shared by the scenes, with the drawing planes of the last checkpoint."""

    def __init__(self, ck: Checkpoints, head: int = 0):
        cfg = ck.run.cfg
        if not 0 <= head < cfg.n_heads:
            from ..errors import FlatformerError

            raise FlatformerError(
                f"--head {head} does not exist: the model has {cfg.n_heads} "
                f"head{'s' if cfg.n_heads > 1 else ''} (0..{cfg.n_heads - 1})"
            )
        self.ck, self.head = ck, head
        self.vocab = display_labels(ck.run.vocab)  # display text: escaped for matplotlib and cut
        self.task = ck.run.task
        self.V, self.T = cfg.d_vocab, cfg.n_ctx
        self.colors = style.token_colors(list(ck.run.vocab), self.task.focus or None)
        final = C.embeddings(ck.models[-1], self.vocab)
        final_proj = C.projections(ck.models[-1])
        self.plane = final.plane
        self.token_plane, self.position_plane = final.token_plane, final.position_plane
        self.planes = {w: final_proj.plane(w, head) for w in "qkv"}
        self.qk_plane = final_proj.qk_plane(head)
        self.emb = [C.embeddings(m, self.vocab, plane=self.plane) for m in ck.models]
        self.proj = [C.projections(m) for m in ck.models]
        self.point_texts = [
            style.point_text(self.vocab[v], t) for v in range(self.V) for t in range(self.T)
        ]
        self.point_colors = np.repeat(np.array(self.colors), self.T)

    def stack(self, fn) -> np.ndarray:
        """fn(frame index) -> array, for every frame, stacked on a leading frame axis."""
        return np.stack([fn(i) for i in range(len(self.ck))])

    @property
    def projected(self) -> bool:
        """Whether any space is drawn through a PCA plane (d_model > 2 or d_head > 2)."""
        planes = [
            self.plane,
            self.token_plane,
            self.position_plane,
            self.qk_plane,
            *self.planes.values(),
        ]
        return not all(p.is_identity for p in planes)

    def plane_note(self) -> str:
        """The footnote of frames drawn through PCA planes: which planes, fixed for the movie."""
        if not self.projected:
            return ""
        return (
            f"points drawn in PCA planes of step {self.ck.steps[-1]:,} (the last checkpoint),"
            f"\nthe same planes in every frame"
        )

    def head_note(self) -> str:
        return f", head {self.head}" if self.ck.run.cfg.n_heads > 1 else ""

    def formula(self, w: str) -> str:
        """How block 0 makes its queries, keys or values from e, e.g. "q = LN(e) W_Q"."""
        cfg = self.ck.run.cfg
        source = {"pre_ln": "LN(e)", "pre_rms": "RMS(e)"}.get(cfg.normalization, "e")
        if cfg.shortformer and w != "v":
            source = f"({source} + p)"
        bias = f" + b_{w.upper()}" if cfg.qkv_bias else ""
        if cfg.rotary and w != "v":
            return f"{w} = rot({source} W_{w.upper()}{bias})"
        return f"{w} = {source} W_{w.upper()}{bias}"


class Scene:
    """One movie: `frame(i)` arrays, `build()` the figure, `update(i)` move its artists."""

    name = ""
    task: str | None = None  # the only task whose runs can have this movie (None: any)
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
        self.canvas = Frame(
            self.width,
            self.height,
            self.n_panels,
            self.ck.steps,
            self.ck.loss,
            self.ck.rule_error,
            wspace=self.wspace,
        )
        if self.note():
            self.canvas.fig.text(
                6 / self.width,
                1 - 8 / self.height,
                self.note(),
                fontsize=7,
                color="0.35",
                va="top",
                ha="left",
            )
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
