"""The feature dashboards' numbers (flatformer/dictionary/dashboards.py) against oracles, and the
page's encoder (explorer/sae.js) against Python's under node: the top contexts are the largest
activations, the histogram counts every firing, the logit effect is the unembedding's change
along the decoder direction, the closest true feature is found, and sae.js computes every kind's
latents as SAELens's rule does."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import CONFIGS, random_model
from flatformer.dictionary import encode, init_stack
from flatformer.dictionary.dashboards import (
    BINS,
    TOP_CONTEXTS,
    dashboards,
    histogram,
    logit_effect,
    page_encoder,
    residual_direction,
    top_contexts,
)
from flatformer.dictionary.saelens import run_saelens, saelens_cfg
from flatformer.errors import FlatformerError
from flatformer.readout.landscape import unembed

ROOT = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")
HOOK = "blocks.0.hook_resid_post"


def member(kind, d, m, seed=0, k=2, hook=HOOK, hook_out=None):
    """One dictionary of `kind` with random weights, as SAELens's cfg and weights."""
    stack = init_stack(kind, d, d, [m], ks=[k], coefs=[1.0], seed=seed, centre=hook_out is None)
    rng = np.random.default_rng(seed + 1)
    stack.b_enc[...] = 0.3 * rng.standard_normal(stack.b_enc.shape)
    stack.b_dec[...] = 0.3 * rng.standard_normal(stack.b_dec.shape)
    if kind == "jumprelu":
        stack.log_threshold[...] = np.log(rng.uniform(0.05, 0.4, stack.log_threshold.shape))
    if kind == "batchtopk":
        stack.threshold[...] = 0.2
    weights = stack.member(0)
    cfg = saelens_cfg(kind, weights, hook, hook_out, k=k, dtype="float64")
    return stack, cfg, weights


def test_top_contexts_are_the_largest_activations_one_per_window():
    f = np.array([0, 5, 1, 0, 0, 2, 4, 0, 3, 0, 0, 0], dtype=float)  # 4 windows of 3
    assert top_contexts(f, 4, 3, n=10) == [(0, 1), (2, 0), (1, 2)]  # window 2's 3 is not shown
    assert top_contexts(f, 4, 3, n=2) == [(0, 1), (2, 0)]
    assert top_contexts(np.zeros(6), 2, 3) == []


def test_histogram_counts_every_nonzero_activation():
    values = np.array([0, 0, 0.5, 1.0, 2.0, 2.0, 0])
    h = histogram(values, bins=4)
    assert h["edges"] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert h["counts"] == [0, 1, 1, 2]  # numpy's last bin holds its right edge
    assert sum(histogram(np.zeros(5))["counts"]) == 0


def test_logit_effect_is_the_unembeddings_change_along_the_decoder_direction():
    model = random_model(CONFIGS["paper-2d"])
    W_dec = np.random.default_rng(0).standard_normal((5, 2))
    x = np.random.default_rng(1).standard_normal((1, 2))
    # the oracle: the readout's own unembedding of residual points, moved along each direction
    moved = unembed(model, x + W_dec) - unembed(model, x)
    np.testing.assert_allclose(logit_effect(model, HOOK, W_dec), moved, atol=1e-12)
    # the dashboards list the largest rises and falls, each of its own sign, from these numbers
    _, cfg, weights = member("relu", 2, 5)
    weights["W_dec"] = W_dec
    vocab = [str(i) for i in range(12)]
    tokens = np.random.default_rng(2).integers(0, 12, (10, 8))
    data = dashboards(model, [("d", cfg, weights)], tokens, vocab, vocab, "t")
    for i, latent in enumerate(data["dictionaries"][0]["latents"]):
        up, down = latent["logits"]["boosted"], latent["logits"]["suppressed"]
        assert up[0][0] == str(moved[i].argmax()) and up[0][1] == pytest.approx(moved[i].max())
        assert down[0][0] == str(moved[i].argmin()) and down[0][1] == pytest.approx(moved[i].min())
        assert all(v > 0 for _, v in up) and all(v < 0 for _, v in down)


def test_logit_effect_carries_hook_z_through_W_O_and_folds_the_final_layernorm():
    model = random_model(CONFIGS["imported-features"])
    p, cfg = model.tensors, model.cfg
    H, dh, d = p["blocks.1.attn.W_O"].shape
    W_dec = np.random.default_rng(0).standard_normal((3, H * dh))
    direction = residual_direction(model, "blocks.1.attn.hook_z", W_dec)
    by_head = sum(W_dec[:, h * dh : (h + 1) * dh] @ p["blocks.1.attn.W_O"][h] for h in range(H))
    np.testing.assert_allclose(direction, by_head, atol=1e-12)
    centred = direction - direction.mean(-1, keepdims=True)
    want = (centred * p["ln_final.w"]) @ p["unembed.W_U"]
    np.testing.assert_allclose(logit_effect(model, "blocks.1.attn.hook_z", W_dec), want, atol=1e-12)
    assert want.shape == (3, cfg.vocab_out)
    W_mlp = np.random.default_rng(2).standard_normal((2, cfg.d_mlp))
    np.testing.assert_allclose(
        residual_direction(model, "blocks.0.mlp.hook_post", W_mlp),
        W_mlp @ p["blocks.0.mlp.W_out"],
    )
    assert logit_effect(model, "blocks.0.ln2.hook_normalized", np.eye(d)) is None


def test_dashboards_show_python_activations_and_the_closest_true_feature():
    model = random_model(CONFIGS["paper-2d"])
    tokens = np.random.default_rng(0).integers(0, 12, (40, 8))
    _, cfg, weights = member("topk", 2, 6, k=1)
    truth = {"north": np.array([0.0, 3.0]), "east": np.array([2.0, 0.0])}
    weights["W_dec"][0] = [0.0, -1.0]  # latent 0 is "north", up to its sign
    vocab = [str(i) for i in range(12)]
    data = dashboards(model, [("d", cfg, weights)], tokens, vocab, vocab, "t", truth)
    (d,) = data["dictionaries"]
    _, cache = model.run_with_cache(tokens)
    x = cache[HOOK].reshape(-1, 2)
    f, _ = run_saelens(cfg, weights, x)
    inputs = data["inputs"][HOOK]
    for i, latent in enumerate(d["latents"]):
        assert latent["density"] == pytest.approx((f[:, i] != 0).mean())
        assert latent["max"] == f[:, i].max()
        assert sum(latent["histogram"]["counts"]) == (f[:, i] != 0).sum()
        assert len(latent["histogram"]["counts"]) == BINS
        assert len(latent["contexts"]) <= TOP_CONTEXTS
        for c in latent["contexts"]:
            window = data["windows"][c["window"]]
            b = next(b for b in range(len(tokens)) if tokens[b].tolist() == window)
            np.testing.assert_array_equal(c["acts"], f[b * 8 : (b + 1) * 8, i])
            np.testing.assert_array_equal(inputs[c["window"]], x[b * 8 : (b + 1) * 8])
        on = f[:, i] != 0
        if on.any():  # the token and position it fires on most, with its share of the firings
            counts = np.bincount(tokens.reshape(-1)[on], minlength=12)
            assert latent["tokens"][0] == [
                vocab[counts.argmax()],
                round(counts.max() / on.sum(), 4),
            ]
            at = np.bincount(np.tile(np.arange(8), len(tokens))[on], minlength=8)
            assert latent["positions"][0] == [int(at.argmax()), round(at.max() / on.sum(), 4)]
        acts = [c["acts"][c["pos"]] for c in latent["contexts"]]
        assert acts == sorted(acts, reverse=True)
        if latent["contexts"]:
            assert acts[0] == latent["max"]
    north = d["latents"][0]["truth"]
    assert north["name"] == "north" and north["cos"] == pytest.approx(1.0)
    # the plane is the activation's own (d_model 2): the arrow ends at b_dec + max W_dec
    end = weights["b_dec"] + d["latents"][0]["max"] * weights["W_dec"][0]
    np.testing.assert_allclose(d["latents"][0]["arrow"][1], end)
    np.testing.assert_allclose(north["arrow"][1], end)


def test_a_dictionary_without_its_hook_or_too_large_is_refused(monkeypatch):
    model = random_model(CONFIGS["paper-2d"])
    _, cfg, weights = member("relu", 2, 4)
    with monkeypatch.context() as m:
        m.setattr("flatformer.dictionary.dashboards.MAX_NUMBERS", 10)
        with pytest.raises(FlatformerError, match="would carry"):
            dashboards(
                model,
                [("d", cfg, weights)],
                np.ones((4, 8), int),
                [str(i) for i in range(12)],
                [str(i) for i in range(12)],
                "t",
            )
    cfg["metadata"]["hook_name"] = "blocks.0.hook_nothing"
    with pytest.raises(FlatformerError, match="no activation named"):
        dashboards(model, [("d", cfg, weights)], np.zeros((1, 8), int), ["a"] * 12, [], "t")
    del cfg["metadata"]
    with pytest.raises(FlatformerError, match="names no activation"):
        dashboards(model, [("d", cfg, weights)], np.zeros((1, 8), int), ["a"] * 12, [], "t")


KINDS = [
    ("relu", {}),
    ("topk", {"k": 3}),
    ("batchtopk", {"k": 3}),
    ("jumprelu", {}),
    ("transcoder", {"hook_out": "blocks.0.hook_mlp_out"}),
]


def sae_fixture() -> dict:
    cases = []
    for n, (kind, extra) in enumerate(KINDS):
        base = "relu" if kind == "transcoder" else kind
        stack, cfg, weights = member(base, 6, 10, seed=n, **extra)
        x = np.random.default_rng(10 + n).standard_normal((60, 6))
        f, _ = run_saelens(cfg, weights, x)
        # SAELens's inference rule (the page's) is the stack's own
        np.testing.assert_allclose(f, encode(stack, x)[0], atol=1e-12)
        assert 0 < (f != 0).sum() < f.size
        cases.append(
            {
                "name": kind,
                "encoder": page_encoder(cfg, weights),
                "x": x.tolist(),
                "f": f.tolist(),
                "active": int((f != 0).sum()),
            }
        )
    return {"cases": cases}


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_pages_encoder_equals_python_under_node(tmp_path):
    path = tmp_path / "sae.json"
    path.write_text(json.dumps(sae_fixture(), allow_nan=False))
    result = subprocess.run(
        [NODE, "--test", str(ROOT / "tests/js/sae.test.js")],
        env={"SAE_FIXTURE": str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout
    assert int(result.stdout.split("# pass ")[1].split()[0]) == len(KINDS) + 1
