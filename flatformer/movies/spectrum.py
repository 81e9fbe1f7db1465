"""Movie 6, modular-addition's: the embedding's Fourier spectrum and the circle of its
strongest frequency."""

from __future__ import annotations

import numpy as np

from ..figures import compute as C
from ..figures import style
from .draw import labels, square_panel
from .scene import Scene


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
        self.labels = labels(plane_ax, self.geo.vocab[: len(self.points[0])], self.hues)
        self.canvas.animate(*self.bars, self.labels)

    def move(self, i, a):
        for bar, height in zip(self.bars, a["norms"]):
            bar.set_height(height)
        self.labels.set_offsets(a["points"])
