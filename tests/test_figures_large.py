"""Figures of a model past the paper's size: the point figures show the most frequent tokens
at a few positions (chosen in the compute layer), every label stays readable, and the memory
estimate counts what the figures compute."""

import numpy as np
import pytest
from clitools import cli

from flatformer.figures import FIGURES, FigureContext
from flatformer.figures import compute as C
from flatformer.store.runs import load_run
from test_figures_labels import problems


def test_a_small_model_shows_every_point():
    shown = C.shown_points(12, 8, np.zeros(12), focus=11, focus_position=5)
    assert shown.every and shown.note == ""
    assert list(shown.tokens) == list(range(12)) and list(shown.positions) == list(range(8))


def test_a_large_model_shows_the_most_frequent_tokens_and_the_focus_at_spread_positions():
    counts = np.zeros(400)
    counts[[7, 300, 42]] = [50, 40, 30]
    shown = C.shown_points(400, 64, counts, focus=399, focus_position=42)
    assert len(shown.tokens) == C.MAX_TOKENS
    assert {7, 300, 42, 399} <= set(shown.tokens) and list(shown.tokens) == sorted(shown.tokens)
    assert {0, 63, 42} <= set(shown.positions) and len(shown.positions) <= C.MAX_POSITIONS + 1
    assert shown.local(399, 42) == (C.MAX_TOKENS - 1, list(shown.positions).index(42))
    assert shown.note.startswith("12 of 400 tokens (the most frequent in the held-out text) at ")
    assert C.shown_points(10, 1024, np.zeros(10), 0, 5).note.startswith("every token at 8 of")


@pytest.fixture(scope="module")
def large_run(tmp_path_factory):
    """An imported GPT-2 of vocabulary 300 and context 32 (9,600 points), with a text."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("large")
    config = GPT2Config(
        vocab_size=300,
        n_positions=32,
        n_embd=64,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    GPT2LMHeadModel(config).save_pretrained(folder / "hf", safe_serialization=True)
    ids = np.minimum(np.random.default_rng(0).zipf(1.3, 4000) - 1, 299)
    (folder / "text.txt").write_text(" ".join(map(str, ids)))
    made = cli("import", folder / "hf", "--corpus", folder / "text.txt", "--out", folder / "run")
    assert made.returncode == 0, made.stderr
    return folder / "run"


@pytest.mark.parametrize(
    "name", ["fig05_embeddings", "fig07_qk_space", "fig08_trigger_qk_scores", "supp_qk_full"]
)
def test_the_point_figures_of_a_large_model_show_a_readable_subset(large_run, name):
    ctx = FigureContext(load_run(large_run))
    compute, draw = FIGURES[name]
    fig = draw(compute(ctx))
    assert problems(fig)[:3] == []
    texts = " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))
    assert "12 of 300 tokens" in texts
    labels = sum(len(ax.texts) for ax in fig.axes)
    assert labels < 200  # 9,600 points: a label each would be neither readable nor cheap


def test_the_estimate_counts_a_landscape_only_for_a_plane_model():
    from flatformer.config import ModelConfig
    from flatformer.store.resources import figures_memory, grid_bytes

    wide = ModelConfig(d_vocab=50_000, n_ctx=64, d_model=64, n_heads=4, d_head=16, d_mlp=256)
    plane = ModelConfig(d_vocab=50_000, n_ctx=64, d_model=2, n_heads=1, d_head=2, d_mlp=8)
    assert figures_memory(wide, 1) < grid_bytes(wide, 200)
    assert figures_memory(plane, 1) > 2 * grid_bytes(plane, 200)


def test_a_figures_job_too_large_is_refused_naming_the_jobs_that_fit():
    from flatformer.config import ModelConfig
    from flatformer.errors import FlatformerError
    from flatformer.publish.pipeline import check_figures_memory
    from flatformer.store.resources import figures_memory

    cfg = ModelConfig(d_vocab=4000, n_ctx=1024, d_model=256, n_heads=8, d_head=32, d_mlp=1024)
    with pytest.raises(FlatformerError, match=r"drawing with 4 processes .* --jobs 2 would fit"):
        check_figures_memory(cfg, 4, 200, memory=figures_memory(cfg, 2, 200) + 1)


def test_the_estimates_forward_pass_is_the_one_the_figures_make():
    from flatformer.readout import points
    from flatformer.store import resources

    assert points.rows_per_pass is resources.rows_per_pass


def test_the_page_shows_the_figures_points_of_a_large_model(
    large_run, chromium, tmp_path, monkeypatch
):
    """The page's token+position clouds show the figures' points (one choice, readout.points),
    so its planes and the QK backdrop cost a few hundred points, not every token at every
    position; and its self-check compares evenly spaced logit columns when every logit of a
    large vocabulary would make the page tens of megabytes."""
    from flatformer.explorer.export import export_run, pack, reference_columns, unpack
    from flatformer.explorer.page import page_html
    from test_explorer_browser import visit

    # the self-check's columns: every logit of a small model, evenly spaced ones of a large one
    assert reference_columns(300, 400) is None
    columns = reference_columns(50_000, 2_000)
    assert len(columns) == 250 and columns[0] == 0 and columns[-1] == 49_999
    monkeypatch.setattr("flatformer.explorer.export.REFERENCE_NUMBERS", 5000)
    shown = FigureContext(load_run(large_run)).shown
    data = export_run(large_run, max_checkpoints=1)
    assert data["shown"] == {
        "tokens": shown.tokens.tolist(),
        "positions": shown.positions.tolist(),
        "note": shown.note,
    }
    assert 2 <= len(data["reference"]["columns"]) < 300
    path = tmp_path / "page.html"
    path.write_text(page_html(data), encoding="utf-8")
    with visit(chromium, path) as page:
        page.wait_for_function("() => explorer.geometry().embed")
        sums = page.evaluate("explorer.geometry().embed.sums.length")
        assert sums == len(shown.tokens) * len(shown.positions)
        assert page.evaluate("explorer.selfCheck.ok")
        body = page.text_content("body")
        assert shown.note in body and "evenly spaced classes" in body
    # a compared logit off by a millionth turns the banner red
    logits = unpack(data["reference"]["logits"]).copy()
    logits[len(logits) // 2] += 1e-6
    data["reference"]["logits"] = pack(logits)
    path.write_text(page_html(data), encoding="utf-8")
    with visit(chromium, path) as page:
        assert not page.evaluate("explorer.selfCheck.ok")
        assert "SELF-CHECK FAILED" in page.text_content(".banner")
