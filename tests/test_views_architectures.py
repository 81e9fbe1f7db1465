"""The views of the newer architectures (RMSNorm, rotary and shortformer positions, gated and
SoLU MLPs, parallel blocks, grouped keys and values): what a figure shows equals the model's
own hooks (float64, 1e-9). Every figure and movie of their runs is drawn in
test_views_architectures_draw.py (its own file, so that another worker draws them)."""

import json

import numpy as np
import pytest

from conftest import RUNS, make_run
from flatformer.config import ModelConfig
from flatformer.engine.model import init_params
from flatformer.model.transformer import Transformer
from flatformer.readout import NotApplicable, output_logits, projections, trace
from flatformer.readout.points import all_points, embeddings, point_scores
from flatformer.store.runs import load_run
from test_architectures import ARCHITECTURES, BASE


def random_model(cfg: ModelConfig, seed: int = 0) -> Transformer:
    rng = np.random.default_rng(seed)
    params = init_params(cfg, [np.random.default_rng(seed)])
    for name, view in params.views.items():
        if "ln" in name or "b_" in name:
            view += 0.3 * rng.standard_normal(view.shape)
    return Transformer(cfg, params.seed(0))


@pytest.fixture(params=list(ARCHITECTURES))
def model(request):
    return random_model(ModelConfig(**{**BASE, **ARCHITECTURES[request.param]}))


def close(got, want, tol=1e-9):
    want = np.asarray(want)
    top = np.abs(want[np.isfinite(want)]).max(initial=1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * top)


def test_the_output_network_is_the_last_blocks_mlp_and_the_unembedding(model):
    """At the last block's resid_mid the output network gives the model's logits; a parallel
    block has no such network and says so."""
    cfg = model.cfg
    tokens = np.random.default_rng(1).integers(0, cfg.d_vocab, (2, cfg.n_ctx))
    logits, cache = model.run_with_cache(tokens)
    b = f"blocks.{cfg.n_layers - 1}."
    if cfg.parallel_attn_mlp:
        with pytest.raises(NotApplicable, match="parallel"):
            output_logits(model, cache[b + "hook_resid_pre"])
        return
    z = cache[b + ("hook_resid_post" if cfg.attn_only else "hook_resid_mid")]
    close(output_logits(model, z), logits)


def test_the_points_and_their_queries_and_keys_are_what_attention_multiplies(model):
    """Every token at every position: the stream block 0 reads, and the queries and keys (the
    rotated ones, the group's keys) whose products are the model's attention scores."""
    cfg = model.cfg
    V, T = cfg.d_vocab, cfg.n_ctx
    cache = all_points(model)
    close(embeddings(model, [str(i) for i in range(V)]).combined, cache["blocks.0.hook_resid_pre"])
    proj = projections(model)
    tokens = np.random.default_rng(2).integers(0, V, (1, T))
    _, seq = model.run_with_cache(tokens)
    for head in range(cfg.n_heads):
        scores = point_scores(proj, head)  # (V, T, V, T)
        at = np.arange(T)
        got = scores[tokens[0][:, None], at[:, None], tokens[0][None, :], at[None, :]]
        want = seq["blocks.0.attn.hook_attn_scores"][0, head]
        visible = np.isfinite(want) & ~np.isnan(got)
        assert visible.sum() >= T
        close(got[visible], want[visible])
    traced = trace(model, tokens[0], [str(i) for i in range(V)])
    close(traced.e, seq["blocks.0.hook_resid_pre"][0])
    for layer, block in enumerate(traced.blocks):
        z = np.einsum("hts,shd->thd", block.pattern, block.v)
        close(z, seq[f"blocks.{layer}.attn.hook_z"][0])
        dots = np.einsum("thd,shd->hts", block.q, block.k) / np.sqrt(cfg.d_head)
        finite = np.isfinite(block.scores)
        close(dots[finite], block.scores[finite])


def test_the_landscape_figure_shows_the_models_logits(plane_run):
    """A one-block plane model: the landscape at each position's resid_mid is its logits."""
    from flatformer.figures import FigureContext

    kind, path = plane_run
    ctx = FigureContext(load_run(path))
    logits, cache = ctx.model.run_with_cache(ctx.sequence)
    if kind == "neox":
        with pytest.raises(NotApplicable):
            ctx.landscape
        return
    close(output_logits(ctx.model, ctx.trace.blocks[0].resid_mid), logits[0])
    close(ctx.trace.blocks[0].resid_mid, cache["blocks.0.hook_resid_mid"][0])


def test_the_logits_split_into_terms_that_sum_to_them(model):
    """Direct logit attribution through the final RMSNorm or LayerNorm (its scale frozen), with
    no position term where positions never reach the stream; the lens's last stage is the
    model's output."""
    from flatformer.analysis.lens import contributions, logit_lens

    cfg = model.cfg
    tokens = np.random.default_rng(3).integers(0, cfg.d_vocab, (2, cfg.n_ctx))
    logits = model(tokens)
    terms = contributions(model, tokens)
    assert ("pos" in terms) == (cfg.positional_embedding_type == "standard")
    close(sum(terms.values()), logits)
    close(list(logit_lens(model, tokens).values())[-1], logits)


# biases and shortformer positions add terms to q and k beyond the bilinear form
BILINEAR = [n for n, a in ARCHITECTURES.items() if not a.get("qkv_bias") and "shortformer" not in n]


@pytest.mark.parametrize("name", BILINEAR)
def test_each_heads_qk_circuit_scores_a_query_reading_its_own_position(name):
    """QK = W_Q W_K^T (the group's W_K): at position 0, where rotary turns nothing, the model's
    score of query 0 on key 0 is a QK a^T / sqrt(d_head), a what attention reads there."""
    from flatformer.analysis.circuits import head_circuits

    model = random_model(ModelConfig(**{**BASE, **ARCHITECTURES[name]}))
    cfg = model.cfg
    tokens = np.random.default_rng(4).integers(0, cfg.d_vocab, (3, cfg.n_ctx))
    _, cache = model.run_with_cache(tokens)
    for c in head_circuits(model):
        b = f"blocks.{c.layer}."
        a = cache[b + ("ln1.hook_normalized" if cfg.pre_norm else "hook_resid_pre")][:, 0]
        score = cache[b + "attn.hook_attn_scores"][:, c.head, 0, 0]
        close(np.einsum("bi,ij,bj->b", a, c.QK, a) / np.sqrt(cfg.d_head), score)


def test_the_full_score_figure_holds_the_models_scores(plane_run):
    """supp_qk_full's matrix at (query token, position) x (key token, position) is the model's
    score of that query on that key, for the pairs of the traced sequence (rotated q and k,
    the group's keys)."""
    from flatformer.figures import FIGURES, FigureContext

    _, path = plane_run
    ctx = FigureContext(load_run(path))
    full = FIGURES["supp_qk_full"][0](ctx)
    V, T = ctx.cfg.d_vocab, ctx.cfg.n_ctx
    tokens = ctx.sequence
    _, cache = ctx.model.run_with_cache(tokens)
    scores = cache["blocks.0.attn.hook_attn_scores"][0, 0]  # head 0
    rows = tokens * T + np.arange(len(tokens))
    got = full.scores.reshape(V * T, V * T)[rows[:, None], rows[None, :]]
    visible = np.isfinite(scores)
    close(got[visible], scores[visible])


def test_the_embedding_figure_says_why_positions_are_zero(plane_run):
    from flatformer.figures import FIGURES, FigureContext

    kind, path = plane_run
    ctx = FigureContext(load_run(path))
    data = FIGURES["fig05_embeddings"][0](ctx)
    if ctx.cfg.rotary:
        assert not data.position.any() and "rotary" in data.positions_note
    else:
        close(data.position, ctx.model.tensors["pos_embed.W_pos"])
        assert data.positions_note == ""


def test_analyze_measures_the_run(plane_run):
    """`flatformer analyze` on the run: its attribution sums to the logits, its stages and
    knobs are this architecture's (no position knob or ladder where positions are rotary)."""
    from clitools import cli_here

    kind, path = plane_run
    result = cli_here("analyze", path, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["lens"]["decomposition_error"] < 1e-9
    stages = [s["stage"] for s in report["lens"]["stages"]]
    assert stages == (["embed", "0.attn+mlp"] if kind == "neox" else ["embed", "0.attn", "0.mlp"])
    knobs = {k["name"] for k in report["knobs"]}
    assert ("positions off" in knobs) == (kind == "solu")
    measures = " ".join(row["measure"] for row in report["algorithm"])
    assert ("ladder" in measures) == (kind == "solu")


@pytest.mark.parametrize("kind", ["llama", "neox"])
def test_compare_aligns_the_seeds_of_a_newer_architecture(kind, tmp_path):
    """`flatformer compare` on three seeds: no position ladder where positions are rotary, and a
    parallel block's landscapes skipped with their reason, the other figures written."""
    from clitools import cli_here

    folder = make_run(
        tmp_path / "seeds", preset_name="paper-2d", steps=200, candidates=1, seeds="0-2",
        **RUNS[kind],
    )  # fmt: skip
    result = cli_here("compare", folder, "--success", "1.0", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"summary.json", "embeddings.png", "invariants.png"} <= written
    if kind == "neox":
        assert "landscapes.png" not in written and "parallel" in result.stderr
    else:
        assert "landscapes.png" in written
    result = cli_here("compare", folder, "--success", "1.0", "--no-figures", "--json")
    report = json.loads(result.stdout)
    assert "positions a monotone ladder" not in json.dumps(report)


def test_a_rotation_of_the_stream_is_a_symmetry_of_the_unnormalised_newer_blocks():
    """Gated MLPs, parallel blocks and grouped keys and values without normalisation: the
    rotated weights (W_gate and the grouped W_K, W_V turned too) compute the same logits."""
    from flatformer.compare import rotate_tensors

    cfg = ModelConfig(**{**BASE, **ARCHITECTURES["bare"], "attn_out": True})
    model = random_model(cfg)
    R = np.linalg.qr(np.random.default_rng(5).standard_normal((cfg.d_model,) * 2))[0]
    turned = Transformer(cfg, rotate_tensors(cfg, model.tensors, R))
    tokens = np.random.default_rng(6).integers(0, cfg.d_vocab, (2, cfg.n_ctx))
    close(turned(tokens), model(tokens))
    _, a = model.run_with_cache(tokens)
    _, b = turned.run_with_cache(tokens)
    close(b["blocks.0.hook_resid_post"], a["blocks.0.hook_resid_post"] @ R)


def test_one_rotated_query_head_patches_alone():
    from flatformer.analysis.interventions import patch

    cfg = ModelConfig(**{**BASE, **ARCHITECTURES["llama"]})
    model = random_model(cfg)
    rng = np.random.default_rng(7)
    clean, corrupt = (rng.integers(0, cfg.d_vocab, (1, cfg.n_ctx)) for _ in range(2))
    _, source = model.run_with_cache(corrupt)
    name = "blocks.1.attn.hook_rot_q"
    _, patched = model.run_with_cache(clean, patch(source, name, head=2))
    _, plain = model.run_with_cache(clean)
    close(patched[name][:, :, 2], source[name][:, :, 2])
    close(patched[name][:, :, 1], plain[name][:, :, 1])
