"""Every figure, as saved, on the paper model and on a simulator-16d model: no two texts overlap,
none leaves the canvas, none is smaller than style.MIN_FONT."""

import matplotlib
import numpy as np
import pytest
from matplotlib.text import Text

from flatformer.figures import FIGURES, FigureContext, NotInPlane
from flatformer.figures.panels import RC
from flatformer.figures.style import MIN_FONT
from flatformer.runs import load_run


def drawn_texts(fig):
    """Every text the saved figure shows, with its box in pixels (a label's leader line is
    not part of its text; tick labels of ticks outside the view are not drawn)."""
    with matplotlib.rc_context(RC):  # as `flatformer figures` saves it
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            drawn = set(map(id, axis._update_ticks())) if ax.axison and axis.get_visible() \
                else set()
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if id(tick) not in drawn:
                    hidden.update({id(tick.label1), id(tick.label2)})
    texts = []
    for t in fig.findobj(Text):
        if id(t) in hidden or not t.get_visible() or not t.get_text().strip():
            continue
        if t.axes is not None and not t.axes.get_visible():
            continue
        box = Text.get_window_extent(t, renderer)
        clip = t.get_clip_box() if t.get_clip_on() else None
        if (clip is not None and not box.overlaps(clip)) or box.width < 1 or box.height < 1:
            continue
        texts.append((t, box.extents))
    return texts


def problems(fig, tolerance=1.0):
    texts = drawn_texts(fig)
    found = [f"{t.get_text()!r} at {t.get_fontsize():.1f} pt" for t, _ in texts
             if t.get_fontsize() < MIN_FONT - 1e-9]
    boxes = np.array([box for _, box in texts]).reshape(-1, 4)
    width, height = fig.bbox.width, fig.bbox.height
    outside = ((boxes[:, 0] < -tolerance) | (boxes[:, 1] < -tolerance)
               | (boxes[:, 2] > width + tolerance) | (boxes[:, 3] > height + tolerance))
    found += [f"{texts[i][0].get_text()!r} leaves the canvas" for i in np.flatnonzero(outside)]
    w = np.minimum(boxes[:, None, 2], boxes[None, :, 2]) - np.maximum(boxes[:, None, 0],
                                                                      boxes[None, :, 0])
    h = np.minimum(boxes[:, None, 3], boxes[None, :, 3]) - np.maximum(boxes[:, None, 1],
                                                                      boxes[None, :, 1])
    for i, j in zip(*np.nonzero(np.triu((w > tolerance) & (h > tolerance), 1))):
        found.append(f"{texts[i][0].get_text()!r} overlaps {texts[j][0].get_text()!r}")
    return found


@pytest.mark.parametrize("run", ["paper_run", "simulator_run"])
def test_no_text_overlaps_or_leaves_the_canvas(run, request):
    ctx = FigureContext(load_run(request.getfixturevalue(run)))
    drawn, report = 0, {}
    for name, (compute, draw) in FIGURES.items():
        try:
            fig = draw(compute(ctx))
        except NotInPlane:
            continue   # the landscape figures of a 16-d model
        drawn += 1
        if found := problems(fig):
            report[name] = found[:5]
    assert drawn >= (21 if run == "paper_run" else 16)
    assert report == {}


def test_the_checker_sees_an_overlap_and_a_text_off_the_canvas():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(2, 1), dpi=100)
    FigureCanvasAgg(fig)
    fig.text(0.1, 0.5, "one label")
    fig.text(0.15, 0.5, "another")
    fig.text(0.95, 0.5, "off the edge")
    fig.text(0.1, 0.1, "tiny", fontsize=3)
    found = problems(fig)
    assert any("overlaps" in f for f in found)
    assert any("'off the edge' leaves the canvas" == f for f in found)
    assert any("'tiny' at 3.0 pt" == f for f in found)
