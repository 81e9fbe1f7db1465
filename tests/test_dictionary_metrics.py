"""Dictionary metrics on hand-built cases whose answers are known: planted features, exact
decoders, a latent that never fires, a reconstruction at half the norm, splices that change
nothing and splices that remove everything; and the SAELens folder written and read back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import CONFIGS, random_model
from flatformer.dictionary import encode, init_stack
from flatformer.dictionary.metrics import reconstruction_metrics, spliced_scores
from flatformer.dictionary.saelens import load_saelens, run_saelens, save_saelens, saelens_cfg
from flatformer.dictionary.truth import mcc, planted_features, truth_report
from flatformer.errors import FlatformerError


def test_exact_decoder_has_mcc_one_and_fvu_zero_and_an_idle_latent_is_dead():
    p = planted_features(12, 5, 2000, 2.0, seed=3)
    assert p.x.shape == (2000, 5) and np.allclose(np.linalg.norm(p.features, axis=1), 1)
    assert 1.7 < (p.codes != 0).sum(1).mean() < 2.3
    f = np.concatenate([p.codes, np.zeros((2000, 1))], axis=1)  # one latent that never fires
    decoder = np.concatenate([p.features, np.ones((1, 5))])
    x_hat = f @ decoder
    m = reconstruction_metrics(p.x, x_hat, f)
    assert m["fvu"] == pytest.approx(0, abs=1e-12) and m["explained_variance"] == pytest.approx(1)
    assert m["dead"] == 1 and m["l0"] == pytest.approx((p.codes != 0).sum(1).mean())
    nonzero = (p.codes != 0).any(1).mean()  # a zero x counts 0 / 1 in the ratio (SAELens)
    assert m["l2_ratio"] == pytest.approx(nonzero) and m["cossim"] == pytest.approx(1)
    assert mcc(p.features, p.features) == pytest.approx(1)
    rng = np.random.default_rng(0)
    shuffled = p.features[rng.permutation(12)] * rng.choice([-1, 1], (12, 1)) * 3.0
    r = truth_report(shuffled, p.features)
    assert r["mcc"] == pytest.approx(1) and r["recovered"] == 12 and r["missed"] == 0


def test_truth_report_says_what_the_mcc_hides():
    features = np.linalg.qr(np.random.default_rng(0).normal(size=(8, 8)))[0]
    half = features[:4]
    r = truth_report(half, features)
    assert r["mcc"] == pytest.approx(1)  # averaged over the 4 matched pairs only
    assert r["coverage"] == pytest.approx(0.5) and r["missed"] == 4 and r["recovered"] == 4
    split = np.concatenate([features, features[:1] + 0.01])
    assert truth_report(split, features)["split"] == 1
    orthogonal = np.eye(4)[[0, 1]]
    assert mcc(orthogonal, np.eye(4)[[2, 3]]) == pytest.approx(0)


def test_fvu_shrinkage_and_density_by_their_definitions():
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 1.5, (500, 3))
    x_hat = x + rng.normal(0, 0.3, x.shape)
    f = (rng.random((500, 6)) < [0.0, 0.05, 0.5, 0.95, 0.2, 0.11]).astype(float)
    m = reconstruction_metrics(x, x_hat, f)
    fvu = ((x - x_hat) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()
    assert m["fvu"] == pytest.approx(fvu, rel=1e-12)
    assert m["dead"] == 1 and m["dense"] == 4  # density over 0.1: 0.5, 0.95, 0.2, 0.11
    half = reconstruction_metrics(x, 0.5 * x, f)
    assert half["l2_ratio"] == pytest.approx(0.5) and half[
        "relative_reconstruction_bias"
    ] == pytest.approx(0.5)


def test_spliced_scores_identity_is_one_and_ablation_is_zero():
    model = random_model(CONFIGS["simulator-16d"])
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, model.cfg.d_vocab, (6, 5))
    targets = rng.integers(0, model.cfg.d_vocab, (6, 5))
    weights = np.ones((6, 5))
    hook = "blocks.0.hook_resid_mid"
    same = spliced_scores(model, tokens, targets, weights, hook, hook, lambda a: a)
    assert same["ce_loss_score"] == pytest.approx(1) and same["kl_div_with_sae"] == pytest.approx(0)
    zero = spliced_scores(model, tokens, targets, weights, hook, hook, np.zeros_like)
    assert zero["ce_loss_score"] == pytest.approx(0) and zero["kl_div_score"] == pytest.approx(0)
    mean = spliced_scores(model, tokens, targets, weights, hook, hook, lambda a: a, "mean")
    assert mean["ce_loss_with_ablation"] != zero["ce_loss_with_ablation"]
    # a transcoder's splice reads its input in the same pass and writes the MLP's output
    mlp = "blocks.0.hook_mlp_out"
    _, cache = model.run_with_cache(tokens)
    table = {cache["blocks.0.ln2.hook_normalized"].tobytes(): cache[mlp]}
    exact = spliced_scores(
        model,
        tokens,
        targets,
        weights,
        "blocks.0.ln2.hook_normalized",
        mlp,
        lambda a: table[a.tobytes()],
    )
    assert exact["ce_loss_score"] == pytest.approx(1)


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_spliced_scores_a_few_windows_a_pass_equal_one_pass(monkeypatch, ablation):
    """A long context's windows are scored a few a pass (the logits of every window, three
    times over, would be the largest thing a dictionary makes): the same scores as one pass,
    and the mean ablation's mean read here equals the one given."""
    model = random_model(CONFIGS["simulator-16d"])
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, model.cfg.d_vocab, (7, 5))
    targets = rng.integers(0, model.cfg.d_vocab, (7, 5))
    weights = rng.random((7, 5))
    hook = "blocks.0.hook_mlp_out"
    args = (model, tokens, targets, weights, hook, hook, lambda a: 0.5 * a, ablation)
    whole = spliced_scores(*args)
    _, cache = model.run_with_cache(tokens)
    given = spliced_scores(*args, mean=cache[hook].reshape(-1, cache[hook].shape[-1]).mean(0))
    monkeypatch.setattr("flatformer.store.resources.rows_per_pass", lambda cfg, width: 2)
    parts = spliced_scores(*args)
    for key, value in whole.items():
        if key != "ablation":
            assert parts[key] == pytest.approx(value, abs=1e-12), key
            assert given[key] == pytest.approx(value, abs=1e-12), key


@pytest.mark.parametrize("kind", ["relu", "topk", "batchtopk", "jumprelu"])
def test_saelens_folder_round_trip(tmp_path, kind):
    stack = init_stack(kind, 4, 4, [6], ks=[2], seed=2)
    stack.b_enc[...] = 0.1
    if kind == "batchtopk":
        stack.threshold[...] = 0.2
    weights = stack.member(0)
    cfg = saelens_cfg(kind, weights, "blocks.0.hook_resid_post", None, k=2, dtype="float64")
    save_saelens(tmp_path / "d", cfg, weights)
    cfg2, w2 = load_saelens(tmp_path / "d")
    assert cfg2 == json.loads(json.dumps(cfg))
    assert {"W_enc": (4, 6), "b_enc": (6,), "W_dec": (6, 4), "b_dec": (4,)}.items() <= {
        n: v.shape for n, v in w2.items()
    }.items()
    assert cfg2["architecture"] == {"relu": "standard", "topk": "topk"}.get(kind, "jumprelu")
    x = np.random.default_rng(0).normal(size=(50, 4))
    f, _ = run_saelens(cfg2, w2, x)
    np.testing.assert_allclose(f, encode(stack, x)[0], atol=1e-12)


def test_saelens_refusals(tmp_path):
    with pytest.raises(FlatformerError, match="not a SAELens folder"):
        load_saelens(tmp_path)
    stack = init_stack("topk", 4, 3, [5], ks=[1], centre=False)
    with pytest.raises(FlatformerError, match="transcoders are ReLU"):
        saelens_cfg("topk", stack.member(0), "blocks.0.hook_resid_mid", "blocks.0.hook_mlp_out")
