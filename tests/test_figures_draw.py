"""Every figure draws for the paper's plane, the simulator's 16-dim stream (PCA planes) and a
two-block model; the checks read artists (titles, labels, colours), not pixels."""

import json
import shutil

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.text import Text

from flatformer.figures import FIGURES, FigureContext, NotInPlane
from flatformer.figures import compute as C
from flatformer.figures.style import point_text, token_colors
from flatformer.store.runs import load_run
from flatformer.tasks import TASKS
from flatformer.tasks.plus_last_even import PlusLastEven

PLANE_ONLY = {
    "fig09_output_landscape",
    "fig10_landscape_summary",
    "fig15_trace_nudge",
    "supp_landscape_embeddings",
    "supp_landscape_values",
}


def draw_all(run_path, **kwargs):
    ctx = FigureContext(load_run(run_path), **kwargs)
    figs, skipped = {}, {}
    for name, (compute, draw) in FIGURES.items():
        try:
            figs[name] = draw(compute(ctx))
        except NotInPlane as exc:
            skipped[name] = str(exc)
    return ctx, figs, skipped


class Drawn(dict):
    """Figures of one context, drawn on first use (the command-line test draws all 22)."""

    def __init__(self, ctx):
        super().__init__()
        self.ctx = ctx

    def __missing__(self, name):
        compute, draw = FIGURES[name]
        self[name] = draw(compute(self.ctx))
        return self[name]


@pytest.fixture(scope="module")
def paper(paper_run):
    ctx = FigureContext(load_run(paper_run))
    return ctx, Drawn(ctx), {}


def texts(fig) -> list[str]:
    found = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
    return [t for t in found if t]


def titled(name, fig, ctx):
    assert isinstance(fig, Figure)
    if name != "fig02_training_data":  # the data does not depend on the checkpoint
        assert f"step {ctx.step}" in fig.get_suptitle()
    assert fig.get_suptitle()
    assert any(
        ax.get_title(loc=loc) or ax.get_xlabel() for ax in fig.axes for loc in ("left", "center")
    )


def test_simulator_figures_use_pca_planes_and_skip_plane_only_ones(simulator_run):
    ctx, figs, skipped = draw_all(simulator_run)
    assert set(skipped) == PLANE_ONLY
    assert all("d_model == 2" in message for message in skipped.values())
    for name, fig in figs.items():
        titled(name, fig, ctx)
    labels = [ax.get_xlabel() for ax in figs["fig05_embeddings"].axes]
    assert any(label.startswith("PC1 (") and label.endswith("%)") for label in labels)
    assert any("head 0 of 2" in t for t in texts(figs["fig07_qk_space"]))


def test_every_figure_draws_for_a_two_block_model(two_layer_run):
    ctx, figs, skipped = draw_all(two_layer_run)
    assert not skipped and list(figs) == list(FIGURES)
    for name, fig in figs.items():
        titled(name, fig, ctx)
    assert any("block 1 (the last of 2)" in t for t in texts(figs["fig10_landscape_summary"]))


def test_token_colours_are_the_same_in_every_figure(paper):
    ctx, figs, _ = paper
    colors = token_colors(ctx.vocab, ctx.task.focus)
    assert colors == ctx.colors and len(set(colors)) == len(colors)
    assert colors[ctx.vocab.index(ctx.task.focus)] == "#000000"
    V, T = ctx.cfg.d_vocab, ctx.cfg.n_ctx
    expected = [c for c in colors for _ in range(T)]
    for name in ("fig05_embeddings", "fig06_qkv"):
        clouds = [
            coll
            for ax in figs[name].axes
            for coll in ax.collections
            if len(coll.get_offsets()) == V * T
        ]
        assert clouds
        for coll in clouds:
            assert [to_hex(c) for c in coll.get_facecolors()] == [c.lower() for c in expected]


def label_boxes(fig, ax):
    """Each label's text box alone (an annotation's own extent includes its leader line)."""
    renderer = fig.canvas.get_renderer()
    boxes = [Text.get_window_extent(t, renderer) for t in ax.texts if t.get_text()]
    return np.array([[b.x0, b.y0, b.x1, b.y1] for b in boxes])


def test_point_labels_do_not_overprint(paper):
    """The paper's own scatter piles the odd digits into one blob; here no two labels of the
    96-point scatters cover more than a sliver of each other."""
    ctx, figs, _ = paper
    for name, panel in (
        ("fig05_embeddings", -1),
        ("fig07_qk_space", 1),
        ("fig10_landscape_summary", 2),
    ):
        fig = figs[name]
        fig.canvas.draw()
        boxes = label_boxes(fig, fig.axes[panel])
        assert len(boxes) >= 20
        w = np.minimum(boxes[:, None, 2], boxes[None, :, 2]) - np.maximum(
            boxes[:, None, 0], boxes[None, :, 0]
        )
        h = np.minimum(boxes[:, None, 3], boxes[None, :, 3]) - np.maximum(
            boxes[:, None, 1], boxes[None, :, 1]
        )
        overlap = np.clip(w, 0, None) * np.clip(h, 0, None)
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        np.fill_diagonal(overlap, 0)
        worst = (overlap / np.minimum(area[:, None], area[None, :])).max()
        assert worst < 0.15, f"{name}: two labels overlap by {worst:.0%}"


SUBSCRIPT = "₀₁₂₃₄₅₆₇₈₉"


def parse_label(text: str) -> set[tuple[str, int]]:
    """The (token, position) pairs a point label names: "+₅", "1,3,5₄", "+₂₋₅", "1,3₀,₂"."""
    pairs = set()
    for part in text.split():
        cut = next(i for i, ch in enumerate(part) if ch in SUBSCRIPT)
        tokens = part[:cut].split(",")
        tail = part[cut:].translate(str.maketrans(SUBSCRIPT, "0123456789"))
        if "₋" in tail:
            lo, hi = tail.split("₋")
            positions = range(int(lo), int(hi) + 1)
        else:
            positions = [int(p) for p in tail.split(",")]
        pairs |= {(tok, pos) for tok in tokens for pos in positions}
    return pairs


def test_embedding_scatter_labels_every_point(paper):
    """Every token-position point is named by a label; coinciding points share one."""
    ctx, figs, _ = paper
    ax = figs["fig05_embeddings"].axes[-1]
    named = set().union(*(parse_label(t.get_text()) for t in ax.texts))
    every = {(v, t) for v in ctx.vocab for t in range(ctx.cfg.n_ctx)}
    assert named == every
    assert len(ax.texts) < len(every)  # the odd-digit blob's labels were merged


def test_nudge_figure_shows_each_focus_token_landing_on_target(paper):
    ctx, figs, _ = paper
    listing = [t for t in texts(figs["fig15_trace_nudge"]) if "target" in t][-1]
    n_focus = ctx.task.demo.split().count(ctx.task.focus)
    assert listing.count("✓") == n_focus and "✗" not in listing


def test_landscape_summary_names_every_zone(paper):
    ctx, figs, _ = paper
    land = ctx.landscape
    tokens, counts = np.unique(land.argmax, return_counts=True)
    big = [ctx.vocab[t] for t, n in zip(tokens, counts) if n > 0.01 * land.argmax.size]
    zone_texts = [t.get_text() for t in figs["fig10_landscape_summary"].axes[1].texts]
    assert set(big) <= set(zone_texts)


def test_panels_follow_the_vocabulary_and_the_sequence(paper):
    ctx, figs, _ = paper
    titles = [ax.get_title() for ax in figs["fig08_trigger_qk_scores"].axes]
    assert [t for t in titles if t.startswith("key ")] == [f"key {v}" for v in ctx.vocab]
    probs = [ax.get_title() for ax in figs["fig09_output_landscape"].axes]
    assert [t for t in probs if t.startswith("P(")] == [f"P(next = {v})" for v in ctx.vocab]
    queries = [
        ax.get_title()
        for ax in figs["fig13_trace_attention"].axes
        if ax.get_title().startswith("query ")
    ]
    assert len(queries) == len(ctx.task.demo.split())


def test_a_shorter_sequence_changes_the_trace(paper_run):
    ctx = FigureContext(load_run(paper_run), sequence="2 +")
    compute, draw = FIGURES["fig13_trace_attention"]
    fig = draw(compute(ctx))
    queries = [ax.get_title() for ax in fig.axes if ax.get_title().startswith("query ")]
    assert queries == ["query 2₀", "query +₁"]


def test_figures_follow_the_task_focus_not_a_fixed_token(paper_run, tmp_path, monkeypatch):
    """A task whose focus is `3` (same rule, same weights): titles and panels follow it."""

    class FocusThree(PlusLastEven):
        name = "plus-last-even-focus3"
        focus = "3"
        demo = "2 3 4 3"

    monkeypatch.setitem(TASKS, FocusThree.name, FocusThree)
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    config = json.loads((paper_run / "config.json").read_text())
    config["task"] = FocusThree.name
    (run_dir / "config.json").write_text(json.dumps(config))
    last = load_run(paper_run).steps[-1]
    name = f"step_{last:06d}.safetensors"
    shutil.copy(paper_run / "checkpoints" / name, run_dir / "checkpoints" / name)
    ctx = FigureContext(load_run(run_dir))
    assert ctx.focus == ctx.vocab.index("3")
    qk = FIGURES["fig07_qk_space"][1](FIGURES["fig07_qk_space"][0](ctx))
    pos = C.default_focus_position(ctx.cfg.n_ctx)
    assert f"query {point_text('3', pos)}" in qk.axes[1].get_title()
    scores = FIGURES["fig08_trigger_qk_scores"][1](FIGURES["fig08_trigger_qk_scores"][0](ctx))
    assert "every '3' query" in scores.get_suptitle()
    assert ctx.colors[ctx.focus] == "#000000" and ctx.colors[ctx.vocab.index("+")] != "#000000"
