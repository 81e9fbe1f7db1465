"""Movie 2: the output landscape, which exists only when d_model == 2."""

from __future__ import annotations

import math

import numpy as np

from ..figures import compute as C
from ..figures import style
from ..readout.landscape import require_output_network
from .draw import labels, square_panel
from .scene import Scene

LANDSCAPE_RESOLUTION = 160


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
        require_output_network(self.ck.models[0], "the landscape movie")
        h = geo.head
        self.combined = geo.stack(lambda i: geo.emb[i].combined.reshape(-1, 2))
        self.values = geo.stack(lambda i: geo.proj[i].written[:, :, h].reshape(-1, 2))
        self.limits = C.square_limits(self.combined, self.values)

    def note(self):
        layers = self.ck.run.cfg.n_layers
        if layers == 1:
            return ""
        return (
            f"the map is block {layers - 1}'s MLP + residual + unembedding;\n"
            f"e and the values are block 0's"
        )

    def frame(self, i):
        land = C.landscape(self.ck.models[i], self.limits, LANDSCAPE_RESOLUTION)
        return {
            "combined": self.combined[i],
            "values": self.values[i],
            "argmax_rgb": landscape_rgb(land, self.geo.colors),
            "argmax": land.argmax,
            "entropy": land.entropy,
        }

    def draw(self, panels):
        g = self.geo
        blank = np.ones((2, 2, 3))
        titles = [
            "argmax next token, with e = x + p",
            f"argmax, with values{g.head_note()}",
            "entropy of the next token (nats)",
        ]
        self.images = []
        for ax, title in zip(panels, titles):
            square_panel(ax, self.limits, title, "", "dim 2" if ax is panels[0] else "")
            self.images.append(
                ax.imshow(
                    blank, origin="lower", extent=self.limits, interpolation="nearest", zorder=0
                )
            )
        from matplotlib import colormaps
        from matplotlib.patches import Patch

        self.images[2].set_cmap(colormaps[style.SEQUENTIAL])
        self.images[2].set_clim(0, math.log(g.V))
        self.images[2].set_data(np.zeros((2, 2)))
        cbar = panels[2].figure.colorbar(self.images[2], ax=panels[2], fraction=0.046, pad=0.03)
        cbar.ax.tick_params(labelsize=7)
        # The colour key of the argmax maps, drawn once (static).
        panels[1].legend(
            [Patch(color=c) for c in g.colors],
            g.vocab,
            ncol=len(g.vocab),
            loc="upper center",
            bbox_to_anchor=(0.5, -0.07),
            fontsize=8,
            frameon=False,
            handlelength=1.0,
            handletextpad=0.3,
            columnspacing=0.9,
        )
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
