"""Every figure, as saved, on the paper model, a simulator-16d model and a 2-layer model, measured
as a reader sees it: no two texts overlap, no text covers a marker it does not label, no edge
crosses a node box it does not join, no text leaves the canvas or touches its edge, none is
smaller than style.MIN_FONT."""

import matplotlib
import numpy as np
import pytest
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.text import Annotation, Text

from flatformer.figures import FIGURES, FigureContext, NotInPlane
from flatformer.figures.panels import RC
from flatformer.figures.style import MIN_FONT
from flatformer.store.runs import load_run


def drawn_texts(fig):
    """Every text the saved figure shows, with its box in pixels (a label's leader line is
    not part of its text; tick labels of ticks outside the view are not drawn)."""
    hidden = set()
    # As `flatformer figures` saves it. The ticks are read under the same settings: how many
    # an axis draws depends on their font size, and outside them it would list other ticks.
    with matplotlib.rc_context(RC):
        fig.canvas.draw()
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                drawn = (
                    set(map(id, axis._update_ticks()))
                    if ax.axison and axis.get_visible()
                    else set()
                )
                for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                    if id(tick) not in drawn:
                        hidden.update({id(tick.label1), id(tick.label2)})
    renderer = fig.canvas.get_renderer()
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


MARGIN = 2.0  # pixels a text keeps from the canvas edge (a title touching it reads as cut)
LABELLED = 6.0  # pixels: a marker this close to an annotation's point is the one it labels


def drawn_markers(fig):
    """Every scatter or line marker drawn inside its axes, as a box in figure pixels."""
    boxes = []
    px_per_pt = fig.dpi / 72
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        frame = ax.bbox
        found = []
        for c in ax.collections:
            if type(c).__name__ != "PathCollection" or not c.get_visible():
                continue
            xy = c.get_offset_transform().transform(c.get_offsets())
            sizes = np.resize(c.get_sizes(), len(xy)) if len(c.get_sizes()) else []
            found += [(p, np.sqrt(s) / 2 * px_per_pt) for p, s in zip(xy, sizes)]
        for line in ax.lines:
            if line.get_visible() and line.get_marker() not in (None, "None", "", " "):
                xy = line.get_transform().transform(line.get_xydata())
                found += [(p, line.get_markersize() / 2 * px_per_pt) for p in xy]
        for (x, y), r in found:
            if (
                np.isfinite([x, y]).all()
                and r > 0
                and frame.x0 <= x <= frame.x1
                and frame.y0 <= y <= frame.y1
            ):
                boxes.append((x - r, y - r, x + r, y + r))
    return np.array(boxes).reshape(-1, 4)


def _overlaps(boxes, others, tolerance):
    w = np.minimum(boxes[:, None, 2], others[None, :, 2]) - np.maximum(
        boxes[:, None, 0], others[None, :, 0]
    )
    h = np.minimum(boxes[:, None, 3], others[None, :, 3]) - np.maximum(
        boxes[:, None, 1], others[None, :, 1]
    )
    return (w > tolerance) & (h > tolerance)


def covered_markers(fig, texts, tolerance=1.0):
    """Texts lying on a marker they do not label (an annotation labels the markers at its
    point; a merged label's point is its group's centre, so its members are within reach)."""
    markers = drawn_markers(fig)
    if not len(markers) or not texts:
        return []
    boxes = np.array([box for _, box in texts])
    hits = _overlaps(boxes, markers, tolerance)
    centres = (markers[:, :2] + markers[:, 2:]) / 2
    found = []
    for i, (t, _) in enumerate(texts):
        if isinstance(t, Annotation) and hits[i].any():
            anchor = t.get_transform().transform(t.xy) if t.xycoords == "data" else None
            if anchor is not None:
                own = np.linalg.norm(centres - anchor, axis=1) <= LABELLED
                hits[i] &= ~own
        if hits[i].any():
            found.append(f"{t.get_text()!r} covers {hits[i].sum()} marker(s)")
    return found


def crossed_nodes(fig, inset=1.5):
    """Edges (arrow patches) passing through a node box (rounded box patch) they do not join:
    an edge joins the boxes its two ends touch."""
    found = []
    for ax in fig.axes:
        nodes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
        edges = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
        if not nodes or not edges:
            continue
        boxes = [p.get_window_extent() for p in nodes]
        names = {}
        for t in ax.texts:
            centre = t.get_window_extent().frozen()
            for b, box in enumerate(boxes):
                if box.contains(*((centre.x0 + centre.x1) / 2, (centre.y0 + centre.y1) / 2)):
                    names.setdefault(b, t.get_text())
        for edge in edges:
            path = edge.get_path().interpolated(40)
            xy = edge.get_transform().transform(path.vertices)
            ends = [xy[0], xy[-1]]
            for b, box in enumerate(boxes):
                grown = box.padded(inset)
                if any(grown.contains(*e) for e in ends):
                    continue
                inside = (
                    (xy[:, 0] > box.x0 + inset)
                    & (xy[:, 0] < box.x1 - inset)
                    & (xy[:, 1] > box.y0 + inset)
                    & (xy[:, 1] < box.y1 - inset)
                )
                if inside.any():
                    found.append(f"an edge crosses the {names.get(b, 'unnamed')!r} box")
    return found


def problems(fig, tolerance=1.0):
    texts = drawn_texts(fig)
    found = [
        f"{t.get_text()!r} at {t.get_fontsize():.1f} pt"
        for t, _ in texts
        if t.get_fontsize() < MIN_FONT - 1e-9
    ]
    boxes = np.array([box for _, box in texts]).reshape(-1, 4)
    width, height = fig.bbox.width, fig.bbox.height
    outside = (
        (boxes[:, 0] < MARGIN)
        | (boxes[:, 1] < MARGIN)
        | (boxes[:, 2] > width - MARGIN)
        | (boxes[:, 3] > height - MARGIN)
    )
    found += [
        f"{texts[i][0].get_text()!r} leaves the canvas or touches its edge"
        for i in np.flatnonzero(outside)
    ]
    w = np.minimum(boxes[:, None, 2], boxes[None, :, 2]) - np.maximum(
        boxes[:, None, 0], boxes[None, :, 0]
    )
    h = np.minimum(boxes[:, None, 3], boxes[None, :, 3]) - np.maximum(
        boxes[:, None, 1], boxes[None, :, 1]
    )
    for i, j in zip(*np.nonzero(np.triu((w > tolerance) & (h > tolerance), 1))):
        found.append(f"{texts[i][0].get_text()!r} overlaps {texts[j][0].get_text()!r}")
    return found + covered_markers(fig, texts, tolerance) + crossed_nodes(fig)


@pytest.mark.parametrize("run", ["paper_run", "simulator_run", "two_layer_run"])
def test_no_text_overlaps_or_leaves_the_canvas(run, request):
    ctx = FigureContext(load_run(request.getfixturevalue(run)))
    drawn, report = 0, {}
    for name, (compute, draw) in FIGURES.items():
        try:
            fig = draw(compute(ctx))
        except NotInPlane:
            continue  # the landscape figures of a 16-d model
        drawn += 1
        if found := problems(fig):
            report[name] = found[:5]
    assert drawn >= (21 if run == "paper_run" else 16)
    assert report == {}


def test_fig07_as_a_reader_sees_it(paper_run):
    """The query/key figure: its labels name one point each, sit beside their points, and
    never cover a star or a triangle they do not name."""
    ctx = FigureContext(load_run(paper_run))
    compute, draw = FIGURES["fig07_qk_space"]
    fig = draw(compute(ctx))
    assert problems(fig) == []


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
    assert any("'off the edge' leaves the canvas or touches its edge" == f for f in found)
    assert any("'tiny' at 3.0 pt" == f for f in found)


def test_the_checker_sees_a_covered_marker_and_an_edge_through_a_box():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.1, 0.1, 0.8, 0.8), xlim=(0, 10), ylim=(0, 10))
    ax.scatter([2, 8], [5, 5], s=30)
    ax.annotate("mine", (2, 5), xytext=(0, 8), textcoords="offset points", ha="center")
    ax.annotate("on the other", (2, 5), xytext=(8, 5), textcoords="data", ha="center", va="center")
    for x in (1, 5, 9):
        ax.add_patch(FancyBboxPatch((x - 0.5, 1), 1, 1, boxstyle="round,pad=0.02"))
    ax.add_patch(FancyArrowPatch((1.5, 1.5), (8.5, 1.5), arrowstyle="-"))
    ax.add_patch(FancyArrowPatch((1.5, 1.5), (4.5, 1.5), arrowstyle="-"))
    fig.canvas.draw()
    found = problems(fig)
    assert "'on the other' covers 1 marker(s)" in found
    assert not any(f.startswith("'mine'") for f in found)
    assert sum("an edge crosses" in f for f in found) == 1


def two_zones(markers=(), keep_clear=None):
    """A hand-made landscape, zone 0 left of x = 5 and zone 1 right of it, named by
    argmax_image over `markers` and the segments `keep_clear`, laid out as a figure is."""
    from flatformer.figures import style
    from flatformer.figures.panels import argmax_image, new_figure
    from flatformer.readout.landscape import Landscape

    xs = ys = np.linspace(0, 10, 100)
    argmax = np.broadcast_to((xs >= 5).astype(int), (100, 100)).copy()
    land = Landscape(xs, ys, np.zeros((100, 100, 2)), argmax, np.zeros((100, 100)))
    with matplotlib.rc_context(RC):
        fig = new_figure(3, 3)
        ax = fig.subplots()
        argmax_image(
            ax, land, ["#0072B2", "#E69F00"], vocab=["left", "right"], keep_clear=keep_clear
        )
        if len(markers):
            ax.scatter(*np.asarray(markers, dtype=float).T, s=10, zorder=3)
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 10)
        style.finish(fig)
    names = {t.get_text(): t for t in fig.axes[0].texts}
    return fig, land, names


def test_a_zone_name_keeps_its_deepest_spot_when_it_is_free():
    from flatformer.figures.panels import zone_spots

    _, land, names = two_zones()
    assert set(names) == {"left", "right"}
    for token, name in enumerate(["left", "right"]):
        assert names[name].get_position() == tuple(zone_spots(land)[token][0])


def test_a_zone_name_moves_off_the_points_and_arrows_but_stays_in_its_zone():
    from flatformer.figures.panels import zone_spots

    deepest = zone_spots(two_zones()[1])[1][0]  # zone 1's deepest spot, (7.5, 5) or beside it
    cloud = deepest + np.stack(np.meshgrid(np.linspace(-1, 1, 5), np.linspace(-0.6, 0.6, 5)), -1)
    fig, land, names = two_zones(markers=cloud.reshape(-1, 2))
    assert problems(fig) == []
    x, y = names["right"].get_position()
    assert x > 5 and tuple((x, y)) != tuple(deepest)
    # An arrow through the deepest spot: the name leaves the arrow's pixels, staying in zone 1.
    arrow = np.array([[[5.5, deepest[1]], [9.5, deepest[1]]]])
    fig, land, names = two_zones(keep_clear=arrow)
    box = names["right"].get_window_extent()
    line_y = fig.axes[0].transData.transform(arrow[0])[0, 1]
    assert not box.y0 - 1 <= line_y <= box.y1 + 1
    assert names["right"].get_position()[0] > 5
