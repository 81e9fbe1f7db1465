"""Drawing helpers shared by the movie scenes: the frame layout and artists updated in place.

Speed comes from building each figure once and then only moving its artists, and from drawing
only those: the static part of a frame (axes, ticks, titles, colour bars, the learning curves) is
rendered once and restored from a pixel copy for every frame (blitting). Text is the expensive
part: matplotlib renders every glyph of a Text again at each draw (the caption line costs
more than the rest of a frame). Point labels are therefore glyph outlines in one
PathCollection per panel, whose offsets are the points (96 labels draw as one artist and move
with one `set_offsets`), and changing text (`GlyphText`) is a path assembled from cached glyph
outlines (bench/movies_speed.py measures the frames).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import PathPatch
from matplotlib.path import Path
from matplotlib.textpath import TextPath, text_to_path
from matplotlib.ticker import PercentFormatter
from matplotlib.transforms import Affine2D, ScaledTranslation

DPI = 100
CAPTION_SIZE = 11
TITLE_SIZE = 10
LABEL_SIZE = 7.5


@lru_cache(maxsize=4096)
def glyphs(text: str, size: float):
    """The outline of `text` in points, centred on (0, 0)."""
    path = TextPath((0, 0), text, prop=FontProperties(size=size))
    box = path.get_extents()
    return path.transformed(Affine2D().translate(-(box.x0 + box.x1) / 2, -(box.y0 + box.y1) / 2))


@lru_cache(maxsize=4096)
def glyph(char: str, size: float, family: str):
    """(vertices, codes, advance) of one character in points, on the baseline at x = 0."""
    prop = FontProperties(size=size, family=family)
    advance = text_to_path.get_text_width_height_descent(char, prop, ismath=False)[0]
    if char.isspace():
        return np.zeros((0, 2)), np.zeros(0, dtype=np.uint8), advance
    path = TextPath((0, 0), char, prop=prop)
    return path.vertices, path.codes, advance


class GlyphText(PathPatch):
    """A line of text that changes every frame, drawn as one path of cached glyph outlines.

    (x, y) is the baseline anchor in `transform` coordinates; `ha` aligns the line on it.
    Kerning is ignored, which at these sizes is invisible; digits have equal advances, so
    numbers do not jitter as they change.
    """

    def __init__(
        self,
        fig,
        x,
        y,
        transform,
        size: float,
        color="black",
        ha: str = "center",
        family: str = "sans-serif",
    ):
        super().__init__(Path(np.zeros((1, 2))), facecolor=color, edgecolor="none", lw=0)
        self.size, self.family, self.ha = size, family, ha
        self.set_transform(Affine2D().scale(fig.dpi / 72) + ScaledTranslation(x, y, transform))
        self.text = ""

    def set_text(self, text: str):
        self.text = text
        vertices, codes, x = [], [], 0.0
        for char in text:
            v, c, advance = glyph(char, self.size, self.family)
            if len(v):
                vertices.append(v + (x, 0.0))
                codes.append(c)
            x += advance
        if not vertices:
            self.set_path(Path(np.zeros((1, 2))))
            return
        shift = {"left": 0.0, "center": -x / 2, "right": -x}[self.ha]
        self.set_path(Path(np.concatenate(vertices) + (shift, 0.0), np.concatenate(codes)))


def labels(ax, texts, colors, size: float = LABEL_SIZE, zorder: float = 3) -> PathCollection:
    """Text labels at data points as one collection: `set_offsets((N, 2))` moves them all."""
    fig = ax.figure
    paths = [glyphs(t, size) for t in texts]
    coll = PathCollection(
        paths,
        offsets=np.zeros((len(paths), 2)),
        offset_transform=ax.transData,
        transform=Affine2D().scale(fig.dpi / 72),
        facecolors=colors,
        edgecolors="none",
        zorder=zorder,
    )
    ax.add_collection(coll)
    return coll


class Frame:
    """A figure of `n_panels` square panels in a row, a caption line on top and a learning-curve
    strip (held-out loss and rule error over all checkpoints, a cursor at the current step) below.

    The layout is fixed once here: no layout engine runs per frame, and every size in pixels is a
    multiple of 16 so H.264 needs no rescaling.
    """

    def __init__(
        self,
        width: int,
        height: int,
        n_panels: int,
        steps,
        loss,
        rule_error,
        strip: float = 0.17,
        wspace: float = 0.22,
    ):
        if width % 16 or height % 16:
            raise ValueError("frame sizes must be multiples of 16 pixels")
        # A bare Figure on an Agg canvas: pyplot (and the user's backend) is never touched.
        self.fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, facecolor="white")
        FigureCanvasAgg(self.fig)
        # Margins in pixels: room for tick labels on the left, the rule-error axis and colour
        # bars on the right, the caption and panel titles on top.
        grid = self.fig.add_gridspec(
            2,
            n_panels,
            height_ratios=[1 - strip, strip],
            left=60 / width,
            right=1 - 70 / width,
            top=1 - 64 / height,
            bottom=36 / height,
            wspace=wspace,
            hspace=0.32,
        )
        self.panels = [self.fig.add_subplot(grid[0, j]) for j in range(n_panels)]
        self.caption = GlyphText(self.fig, 0.5, 1 - 24 / height, self.fig.transFigure, CAPTION_SIZE)
        self.fig.add_artist(self.caption)
        self.strip = self.fig.add_subplot(grid[1, :])
        self.moving: list = [self.caption]
        self._background = None
        self._curves(np.asarray(steps), np.asarray(loss), np.asarray(rule_error))

    def animate(self, *artists):
        """Register artists that change between frames (everything else is drawn once)."""
        self.moving.extend(artists)
        return artists[0] if len(artists) == 1 else artists

    def _curves(self, steps, loss, rule_error):
        from ..figures.style import WRONG_COLOR

        ax = self.strip
        ax.plot(steps, loss, color="0.25", lw=1.2, label="held-out loss")
        ax.set_xlim(steps[0], steps[-1])
        finite = loss[np.isfinite(loss)]
        if len(finite):
            lo, hi = finite.min(), finite.max()
            ax.set_ylim(lo - 0.05 * (hi - lo + 1e-9), hi + 0.05 * (hi - lo + 1e-9))
        ax.set_ylabel("loss", fontsize=8)
        ax.tick_params(labelsize=7)
        twin = ax.twinx()
        twin.plot(steps, rule_error, color=WRONG_COLOR, lw=1.2)
        twin.set_ylim(-0.03, 1.03)
        twin.set_ylabel("rule error", fontsize=8, color=WRONG_COLOR)
        twin.tick_params(labelsize=7, colors=WRONG_COLOR)
        twin.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        self.cursor = ax.axvline(steps[0], color="0.5", lw=1)
        (self.loss_dot,) = ax.plot([], [], "o", color="0.25", ms=4)
        (self.rule_dot,) = twin.plot([], [], "o", color=WRONG_COLOR, ms=4)
        self.animate(self.cursor, self.loss_dot, self.rule_dot)
        self._data = (steps, loss, rule_error)

    def update(self, i: int, caption: str):
        steps, loss, rule_error = self._data
        self.caption.set_text(caption)
        self.cursor.set_xdata([steps[i], steps[i]])
        self.loss_dot.set_data([steps[i]], [loss[i]])
        self.rule_dot.set_data([steps[i]], [rule_error[i]])

    def rgba(self) -> np.ndarray:
        """Draw the frame and return it as an (H, W, 4) uint8 array (a copy; alpha is 255).

        The first call renders everything but the moving artists and keeps those pixels; every
        call then restores them and draws the moving artists on top, in the order registered.
        RGBA rather than RGB: it is the canvas's own layout (a plain copy), ffmpeg converts it
        itself, and one 32-bit compare finds the white background for the GIF palette.
        """
        canvas = self.fig.canvas
        if self._background is None:
            for artist in self.moving:
                artist.set_animated(True)
            canvas.draw()
            self._background = canvas.copy_from_bbox(self.fig.bbox)
        canvas.restore_region(self._background)
        for artist in self.moving:
            self.fig.draw_artist(artist)
        return np.array(canvas.buffer_rgba())


def square_panel(ax, limits, title: str, xlabel: str = "", ylabel: str = "", color=None):
    """Fixed limits, equal aspect, light grid through the origin, a title (optionally coloured)."""
    ax.set_xlim(limits[0], limits[1])
    ax.set_ylim(limits[2], limits[3])
    ax.set_aspect("equal", adjustable="box")
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    ax.set_title(title, fontsize=TITLE_SIZE, color=color or "black")
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    if color:
        for spine in ax.spines.values():
            spine.set_edgecolor(color)
