"""The figures' numbers (flatformer/figures/compute.py) checked against the engine's own
activations: hooks, caches and plain matrix arithmetic on the checkpoint's tensors."""

import math

import numpy as np
import pytest

from flatformer.figures import FIGURES, FigureContext, NotInPlane
from flatformer.figures import compute as C
from flatformer.figures.trace_values import compute_trace_nudge
from flatformer.store.runs import load_run
from flatformer.tasks import get_task

ISSUE_NAMES = [
    "fig02_training_data",
    "fig03_learning_curve",
    "fig04_generated_sequences",
    "fig05_embeddings",
    "fig06_qkv",
    "fig07_qk_space",
    "fig08_trigger_qk_scores",
    "fig09_output_landscape",
    "fig10_landscape_summary",
    "fig11_trace_embeddings",
    "fig12_trace_qk",
    "fig13_trace_attention",
    "fig14_trace_values",
    "fig15_trace_nudge",
    "supp_qkv_overview",
    "supp_attention_matrices",
    "supp_value_arrows",
    "supp_qkv_dimensions",
    "supp_qk_full",
    "supp_landscape_embeddings",
    "supp_landscape_values",
    "supp_circuit",
]


@pytest.fixture(scope="module")
def paper(paper_run):
    run = load_run(paper_run)
    return run, run.model()


@pytest.fixture(scope="module")
def sim(simulator_run):
    run = load_run(simulator_run)
    return run, run.model()


def test_registry_has_exactly_the_issue_figures():
    assert list(FIGURES) == ISSUE_NAMES


def test_combined_points_are_token_plus_position(paper):
    run, model = paper
    emb = C.embeddings(model, run.vocab)
    W_E, W_pos = model.tensors["embed.W_E"], model.tensors["pos_embed.W_pos"]
    np.testing.assert_allclose(emb.combined, W_E[:, None] + W_pos[None], atol=1e-12)
    focus = C.focus_token(run.task)
    assert emb.labels[focus, 5] == run.task.focus + "5"
    assert emb.plane.is_identity and emb.plane.axis_labels() == ("dim 1", "dim 2")


def test_projections_match_the_weights_and_the_sequence_cache(paper, sim):
    run, model = paper
    proj = C.projections(model)
    e = C.embeddings(model, run.vocab).combined
    for letter in "QKV":  # paper-2d: no LayerNorm, no bias, so q = e W_Q exactly
        W = model.tensors[f"blocks.0.attn.W_{letter}"][0]
        np.testing.assert_allclose(getattr(proj, letter.lower())[:, :, 0], e @ W, atol=1e-12)
    # simulator-16d (LayerNorm first, two heads): a point's q, k, v equal those the engine
    # computes for that token at that position inside an ordinary sequence.
    run, model = sim
    proj = C.projections(model)
    tokens = run.task.encode(run.task.demo)
    _, cache = model.run_with_cache(tokens)
    for i, t in enumerate(tokens):
        for letter in "qkv":
            np.testing.assert_allclose(
                getattr(proj, letter)[t, i], cache[f"blocks.0.attn.hook_{letter}"][0, i], atol=1e-12
            )
    # what a head writes when it attends to one key: v_h @ W_O[h], summing to hook_attn_out
    W_O = model.tensors["blocks.0.attn.W_O"]
    np.testing.assert_allclose(proj.written[3, 2, 1], proj.v[3, 2, 1] @ W_O[1], atol=1e-12)


def test_point_scores_equal_the_engine_scores(sim):
    run, model = sim
    proj = C.projections(model)
    scores = C.point_scores(proj, head=1)
    rng = np.random.default_rng(0)
    T, V = model.cfg.n_ctx, model.cfg.d_vocab
    for _ in range(10):
        tokens = rng.integers(0, V, T)
        _, cache = model.run_with_cache(tokens)
        engine = cache["blocks.0.attn.hook_attn_scores"][0, 1]  # (T, T)
        t, s = sorted(rng.integers(0, T, 2))[::-1]
        assert scores[tokens[t], t, tokens[s], s] == pytest.approx(engine[t, s], abs=1e-10)
    assert np.isnan(scores[0, 2, 0, 3]) and not np.isnan(scores[0, 3, 0, 2])


def test_qk_field_is_the_dot_product_over_the_plane(paper, sim):
    for run, model in (paper, sim):
        proj = C.projections(model)
        q = proj.q[4, 5, 0]
        plane = proj.qk_plane(0)
        limits = (-3.0, 2.0, -1.0, 4.0)
        fld = C.qk_field(q, plane, limits, resolution=11)
        i, j = 7, 3  # grid point (xs[j], ys[i])
        key = plane.lift([fld.xs[j], fld.ys[i]])
        assert fld.values[i, j] == pytest.approx(key @ q / math.sqrt(model.cfg.d_head), abs=1e-12)
        assert plane.project(key) == pytest.approx([fld.xs[j], fld.ys[i]], abs=1e-12)
    # in the paper's plane a key is its own point: the field at it is the engine's score
    run, model = paper
    proj = C.projections(model)
    k = proj.k[2, 1, 0]
    fld = C.qk_field(
        proj.q[11, 5, 0],
        C.fit_plane(proj.k[:, :, 0]),
        (k[0], k[0] + 1, k[1], k[1] + 1),
        resolution=2,
    )
    _, cache = model.run_with_cache([0, 2, 0, 0, 0, 11])
    assert fld.values[0, 0] == pytest.approx(
        cache["blocks.0.attn.hook_attn_scores"][0, 0, 5, 1], abs=1e-10
    )


def test_pca_plane_of_a_wide_space():
    rng = np.random.default_rng(1)
    x = (
        rng.standard_normal((200, 2)) @ np.array([[3.0, 0, 0, 0], [0, 1.0, 0, 0]])
        + 0.01 * rng.standard_normal((200, 4))
        + 5.0
    )
    plane = C.fit_plane(x)
    assert not plane.is_identity and plane.explained[0] > 0.85 > plane.explained[1] > 0.05
    assert plane.explained.sum() <= 1 + 1e-12
    np.testing.assert_allclose(plane.axes @ plane.axes.T, np.eye(2), atol=1e-12)
    assert abs(plane.axes[0, 0]) > 0.99 and plane.axes[0, 0] > 0  # deterministic sign
    labels = plane.axis_labels()
    assert labels[0].startswith("PC1 (") and labels[0].endswith("%)")
    np.testing.assert_allclose(plane.project(plane.lift([[0.3, -1.2]])), [[0.3, -1.2]], atol=1e-12)


def test_landscape_equals_the_model_with_the_residual_replaced(paper, two_layer_run):
    """The landscape at a grid point is what the whole engine predicts when the last block's
    resid_mid is set to that point (hooked in), for one and for two blocks."""
    for run, model in (paper, (lambda r: (r, r.model()))(load_run(two_layer_run))):
        land = C.landscape(model, (-2.0, 2.0, -1.5, 2.5), resolution=9)
        T = model.cfg.n_ctx
        picks = [(0, 0), (4, 4), (8, 1), (3, 7), (6, 2), (1, 8), (5, 5), (2, 6)][:T]
        points = np.array([[land.xs[j], land.ys[i]] for i, j in picks])  # (T, 2)
        name = f"blocks.{model.cfg.n_layers - 1}.hook_resid_mid"
        logits, _ = model.run_with_cache(
            np.arange(T) % model.cfg.d_vocab, hooks={name: lambda act, n: points[None]}
        )
        probs = C.softmax(logits[0])
        for (i, j), p in zip(picks, probs):
            np.testing.assert_allclose(land.probs[i, j], p, atol=1e-12)
            assert land.argmax[i, j] == p.argmax()
            assert land.entropy[i, j] == pytest.approx(-(p * np.log(p)).sum(), abs=1e-9)


def test_landscape_needs_the_plane(sim):
    run, model = sim
    with pytest.raises(NotInPlane, match="d_model == 2"):
        C.landscape(model, (-1, 1, -1, 1))
    # the output network itself works in any width: it reproduces the logits
    tr = C.trace(model, run.task.encode(run.task.demo), run.vocab)
    np.testing.assert_allclose(
        C.output_logits(model, tr.blocks[-1].resid_mid), tr.logits, atol=1e-10
    )


def test_trace_reads_the_cache_and_obeys_the_residual_equations(paper, sim):
    for run, model in (paper, sim):
        tokens = run.task.encode(run.task.demo)
        tr = C.trace(model, tokens, run.vocab)
        b = tr.blocks[0]
        np.testing.assert_allclose(b.resid_pre, tr.e, atol=1e-12)  # e = x + p
        np.testing.assert_allclose(b.resid_mid, tr.e + b.attn_out, atol=1e-12)  # z = e + Attn
        np.testing.assert_allclose(b.resid_post, b.resid_mid + b.mlp_out, atol=1e-12)
        np.testing.assert_allclose(b.pattern.sum(-1), 1.0, atol=1e-12)
        np.testing.assert_allclose(b.z, np.einsum("hij,jhd->ihd", b.pattern, b.v), atol=1e-12)
        logits = model(tokens)[0]
        np.testing.assert_allclose(tr.logits, logits, atol=1e-12)
        assert tr.labels[2] == run.task.demo.split()[2] + "2"
    run, model = paper  # no W_O: the head's z is the attention output
    tr = C.trace(model, run.task.encode(run.task.demo), run.vocab)
    np.testing.assert_allclose(tr.blocks[0].attn_out, tr.blocks[0].z[:, 0], atol=1e-12)


def test_trained_model_nudges_every_focus_token_into_its_target_zone(paper_run):
    ctx = FigureContext(load_run(paper_run))
    data = compute_trace_nudge(ctx)
    assert len(data.focus_positions) == ctx.task.demo.split().count(ctx.task.focus)
    for i in data.focus_positions:
        assert data.decided[i] and data.allowed[i].sum() == 1
        assert data.allowed[i, data.landed[i]]
    # the zone read off the drawn argmax grid agrees with the exact output network
    assert np.array_equal(
        data.land.at(data.end)[data.focus_positions], data.landed[data.focus_positions]
    )
    # and the exact zone is the model's own prediction (one block: z feeds the output network)
    np.testing.assert_array_equal(data.landed, ctx.trace.logits.argmax(-1))


def test_next_allowed_and_rule_status():
    task = get_task("plus-last-even")
    seq = np.array(task.encode("4 1 + 4 6 9 5 +"))
    allowed, decided = C.next_allowed(task, seq)
    assert list(decided) == [False, False, True, False, False, False, False, True]
    assert list(np.flatnonzero(allowed[2])) == [4] and list(np.flatnonzero(allowed[7])) == [6]
    written = np.array(task.encode("4 1 + 3 6 + 6 + 1"))
    status = C.rule_status(task, written, n_ctx=8)
    assert list(status) == [-1, -1, -1, 0, -1, -1, 1, -1, 0]
    # a source beyond the context window does not count
    far = np.array(task.encode("4 1 1 1 1 1 1 1 1 + 4"))
    assert C.rule_status(task, far, n_ctx=8)[-1] == -1
    assert C.rule_status(task, far, n_ctx=10)[-1] == 1


def test_generate_is_seeded_and_keeps_the_prompt(paper):
    run, model = paper
    prompts = np.array([[1, 2, 11], [4, 4, 4]])
    a = C.generate(model, prompts, 20, seed=3)
    b = C.generate(model, prompts, 20, seed=3)
    assert a.shape == (2, 20) and np.array_equal(a, b)
    assert np.array_equal(a[:, :3], prompts)
    assert a.min() >= 0 and a.max() < model.cfg.d_vocab


def test_square_limits_cover_the_points_with_equal_spans():
    pts = np.array([[0.0, 0.0], [4.0, 1.0], [1.0, -1.0]])
    x0, x1, y0, y1 = C.square_limits(pts)
    assert x1 - x0 == pytest.approx(y1 - y0)
    assert x0 < 0 and x1 > 4 and y0 < -1 and y1 > 1
