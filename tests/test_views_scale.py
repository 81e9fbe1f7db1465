"""The views at imported sizes: the shortcuts that make them fast give the reference's numbers,
and what they narrow (rule-error positions, circuit prompts, labels) is narrowed as stated."""

import numpy as np
import pytest

from conftest import CONFIGS, random_model
from flatformer.edges.budget import (
    MIN_PROMPTS,
    SEARCH_PASSES,
    UNITS_PER_SECOND,
    choose_scope,
    cut_windows,
    search_seconds,
)
from flatformer.edges.graph import EdgeGraph
from flatformer.engine.components import rows_times
from flatformer.engine.engines import REFERENCE, windows_per_chunk
from flatformer.engine.model import Params
from flatformer.figures.panels import MAX_TICKS, labelled
from flatformer.readout.points import first_block, point_hooks, some_points
from flatformer.tasks.imported import ImportedTask
from flatformer.tasks.windows import RULE_MIN_WINDOWS, TaskData, rule_windows_kept


def test_a_shared_matrix_times_every_row_at_once_is_the_stacked_product():
    rng = np.random.default_rng(0)
    x, W = rng.standard_normal((3, 5, 7, 6)), rng.standard_normal((6, 4))
    assert np.array_equal(rows_times(x, W), x @ W)
    assert np.array_equal(rows_times(x[0, 0], W), x[0, 0] @ W)
    W3 = rng.standard_normal((3, 6, 4))  # a matrix per seed: left to NumPy's own product
    assert np.array_equal(rows_times(x[:, 0], W3), x[:, 0] @ W3)


@pytest.mark.parametrize("name", ["2-layer-ln-bias", "imported-features", "attn-only-ln-final"])
def test_logits_at_one_position_a_window_are_the_full_pass_at_it(name):
    cfg = CONFIGS[name]
    model = random_model(cfg)
    params = Params.stack(cfg, [model.tensors])
    rng = np.random.default_rng(1)
    inputs = rng.integers(0, cfg.d_vocab, (70, cfg.n_ctx))
    index = rng.integers(0, cfg.n_ctx, 70)
    index[:20] = cfg.n_ctx - 1  # many windows read at one position: batched together
    full = REFERENCE.logits_at(params, inputs)  # (1, W, T, V)
    at = REFERENCE.logits_at(params, inputs, index)  # (1, W, V)
    np.testing.assert_allclose(at[0], full[0, np.arange(70), index], rtol=0, atol=1e-12)


def test_windows_a_pass_are_bounded_by_positions_and_attention_weights():
    assert windows_per_chunk(8) == 64  # the presets' windows, as before
    assert windows_per_chunk(64, 4) == 64
    assert windows_per_chunk(1024, 8) == 1  # 8 heads x 1024^2 weights a layer
    assert windows_per_chunk(256, 4) * 256 <= 4096


def test_the_rule_error_reads_an_evenly_spaced_sample_past_its_budget():
    assert np.array_equal(rule_windows_kept(1000, 32), np.arange(1000))  # 32,000 tokens
    kept = rule_windows_kept(20_000, 64, budget=2**15)
    assert len(kept) == 2**15 // 64 and kept[0] == 0 and kept[-1] == 19_999
    assert len(rule_windows_kept(5000, 1024, budget=2**15)) == 32
    assert len(rule_windows_kept(5000, 4096, budget=2**15)) == RULE_MIN_WINDOWS


def test_an_imported_text_states_how_many_positions_its_rule_error_read():
    task = ImportedTask([str(i) for i in range(50)])
    ids = np.random.default_rng(0).integers(0, 50, 3000)
    task.set_text(" ".join(map(str, ids)), 64)
    data = TaskData.build(task, 64)
    assert data.rule_total == 2999  # every position after the first is constrained
    assert len(data.rule_inputs) == ImportedTask.rule_tokens // 64 < data.rule_total
    windows, index = data.rule_inputs, data.rule_index
    assert (windows[np.arange(len(index)), index] >= 0).all()


def test_a_preset_measures_every_default_prompt_and_a_tight_budget_narrows():
    model = random_model(CONFIGS["attn-only-ln-final"])  # a 32-token context
    scope = choose_scope(model, model.cfg.n_ctx, 200)
    assert (scope.prompts, scope.length, scope.narrowed) == (200, None, False)
    graph = EdgeGraph(model)
    tight = search_seconds(model.cfg, graph, 20, model.cfg.n_ctx) * (1 + 1e-9)  # 20 prompts
    narrowed = choose_scope(model, model.cfg.n_ctx, 200, budget=tight)
    assert narrowed.narrowed and narrowed.length is None and narrowed.prompts == 20
    shorter = choose_scope(model, model.cfg.n_ctx, 200, budget=tight / 20)
    assert shorter.length is not None and shorter.length < model.cfg.n_ctx
    assert shorter.prompts >= MIN_PROMPTS
    given = choose_scope(model, model.cfg.n_ctx, 300, model.cfg.n_ctx, budget=float("inf"))
    assert (given.prompts, given.length, given.narrowed) == (300, None, False)


def test_reading_every_position_counts_each_readout_in_the_estimate():
    """--positions all reads T - 1 positions of each prompt: the logits over the vocabulary and
    the last block's query and MLP there, each a readout the estimate counts."""
    model = random_model(CONFIGS["2-layer-ln-bias"])
    cfg, graph, T = model.cfg, EdgeGraph(model), model.cfg.n_ctx
    last, every = (search_seconds(cfg, graph, 10, T, p) for p in ("last", "all"))
    logits = (SEARCH_PASSES * graph.n_edges + 8) * 10 * (T - 2) * cfg.vocab_out * cfg.d_model
    assert every - last > logits / UNITS_PER_SECOND * (1 - 1e-9)
    assert search_seconds(cfg, graph, 10, T) == last  # the default reads one position
    fits = search_seconds(cfg, graph, 200, T, "last") * (1 + 1e-9)
    assert choose_scope(model, T, 200, budget=fits).prompts == 200
    narrowed = choose_scope(model, T, 200, budget=fits, positions="all")
    assert narrowed.narrowed and narrowed.seconds <= fits
    assert narrowed.seconds == search_seconds(
        cfg, graph, narrowed.prompts, narrowed.length or T, "all"
    )


def test_cut_windows_keeps_the_first_tokens_and_the_predictions_inside_them():
    task = ImportedTask([str(i) for i in range(20)])
    task.set_text(" ".join(map(str, np.random.default_rng(2).integers(0, 20, 400))), 16)
    data = TaskData.build(task, 16)
    cut = cut_windows(data, 5)
    assert cut.val_inputs.shape[1] == 5 and cut.val_targets.shape[1] == 5
    assert (cut.rule_index < 5).all() and len(cut.rule_index) == (data.rule_index < 5).sum()
    assert np.array_equal(cut.val_inputs, data.val_inputs[:, :5])
    assert cut_windows(data, None) is data


def test_the_sampled_points_stop_after_block_0_with_the_same_numbers():
    model = random_model(CONFIGS["2-layer-ln-bias"])
    assert first_block(model).cfg.n_layers == 1
    tokens, positions = np.array([1, 4, 7]), np.array([0, 2, 5])
    points = some_points(model, tokens, positions)
    _, cache = model.run_with_cache(np.repeat(tokens[:, None], 6, axis=1))
    for name in point_hooks(model.cfg):
        assert np.array_equal(points[name], cache[name][:, positions]), name


def test_a_heatmap_labels_at_most_max_ticks_rows():
    assert labelled(12) == list(range(12))
    assert labelled(MAX_TICKS) == list(range(MAX_TICKS))
    many = labelled(4000)
    assert len(many) <= MAX_TICKS and many[0] == 0
