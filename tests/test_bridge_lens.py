"""The bridges: `to_torch` and `to_transformer_lens` compute the engine's numbers."""

import numpy as np
import pytest
import torch
from conftest import CONFIGS, random_model

from flatformer.model.bridge import to_torch, to_transformer_lens
from flatformer.config import preset
from flatformer.store.runs import load_run
from flatformer.analysis.circuits import head_circuits

RUNS = ["paper_run", "simulator_run", "two_layer_run"]


def tokens_for(cfg, seed=0, batch=6):
    return np.random.default_rng(seed).integers(0, cfg.d_vocab, (batch, cfg.n_ctx))


@pytest.mark.parametrize("fixture", RUNS)
def test_torch_and_transformer_lens_logits_equal_the_engine(fixture, request):
    run = load_run(request.getfixturevalue(fixture))
    model = run.model()
    tokens = tokens_for(run.cfg)
    expected = model(tokens)
    with torch.no_grad():
        torch_logits = to_torch(run)(torch.tensor(tokens)).numpy()
        tl_logits = to_transformer_lens(run)(torch.tensor(tokens)).numpy()
    np.testing.assert_allclose(torch_logits, expected, atol=1e-9, rtol=0)
    np.testing.assert_allclose(tl_logits, expected, atol=1e-9, rtol=0)
    # An earlier checkpoint is a different model: the step argument must reach the weights.
    with torch.no_grad():
        early = to_transformer_lens(run, step=0)(torch.tensor(tokens)).numpy()
    np.testing.assert_allclose(early, run.model(0)(tokens), atol=1e-9, rtol=0)
    assert np.abs(early - expected).max() > 1e-3


def test_transformer_lens_on_layernorm_biases_and_two_layers():
    cfg = preset("simulator-16d", 20, n_layers=2, qkv_bias=True, unembed_bias=True)
    model = random_model(cfg)
    tokens = tokens_for(cfg)
    with torch.no_grad():
        logits = to_transformer_lens(model)(torch.tensor(tokens)).numpy()
    np.testing.assert_allclose(logits, model(tokens), atol=1e-9, rtol=0)


def test_a_model_that_attends_to_every_key_in_both_bridges():
    """A compiled RASP program's attention is not causal (`causal: false`): both bridges read
    later keys as the engine does."""
    cfg = preset("simulator-16d", 20, n_layers=2, causal=False)
    model = random_model(cfg)
    tokens = tokens_for(cfg)
    with torch.no_grad():
        torch_logits = to_torch(model)(torch.tensor(tokens)).numpy()
        tl_logits = to_transformer_lens(model)(torch.tensor(tokens)).numpy()
    expected = model(tokens)
    np.testing.assert_allclose(torch_logits, expected, atol=1e-9, rtol=0)
    np.testing.assert_allclose(tl_logits, expected, atol=1e-9, rtol=0)
    causal = random_model(cfg.replace(causal=True))
    assert np.abs(causal(tokens) - expected).max() > 1e-3  # the masks differ, and matter


@pytest.mark.parametrize(
    "features",
    [
        dict(attn_out_bias=True),
        dict(act_fn="gelu_erf"),
        dict(d_vocab_out=9),
        dict(attn_out_bias=True, act_fn="gelu_erf", d_vocab_out=9, unembed_bias=True),
    ],
)
def test_imported_model_features_in_both_bridges(features):
    """b_O, the exact GELU and d_vocab_out < d_vocab: torch and TransformerLens equal the engine."""
    cfg = preset("simulator-16d", 13, n_layers=2, **features)
    model = random_model(cfg)
    tokens = tokens_for(cfg)
    with torch.no_grad():
        tl_logits = to_transformer_lens(model)(torch.tensor(tokens)).numpy()
        torch_logits = to_torch(model)(torch.tensor(tokens)).numpy()
    assert tl_logits.shape[-1] == cfg.vocab_out
    np.testing.assert_allclose(tl_logits, model(tokens), atol=1e-9, rtol=0)
    np.testing.assert_allclose(torch_logits, model(tokens), atol=1e-9, rtol=0)


CACHE_CONFIGS = {
    name: preset(name, 12) for name in ["paper-2d", "simulator-16d", "paper-2d-2layer"]
}
CACHE_CONFIGS["attn-only-ln-final"] = CONFIGS["attn-only-ln-final"]
# A final LayerNorm without block LayerNorms: TransformerLens ties the two, the bridge does not.
CACHE_CONFIGS["2d-attn-only-ln-final"] = preset("paper-2d-2layer", 12, d_mlp=0, ln_final=True)


@pytest.mark.parametrize("name", list(CACHE_CONFIGS))
def test_transformer_lens_cache_matches_the_engine(name):
    cfg = CACHE_CONFIGS[name]
    model = random_model(cfg)
    tokens = tokens_for(cfg, batch=3)
    _, cache = model.run_with_cache(tokens)
    with torch.no_grad():
        _, tl_cache = to_transformer_lens(model).run_with_cache(torch.tensor(tokens))
    mask = np.tril(np.ones((cfg.n_ctx, cfg.n_ctx), dtype=bool))
    for hook in model.hook_names:
        ours, theirs = cache[hook], tl_cache[hook].numpy()
        assert theirs.shape == ours.shape, hook
        if hook.endswith("hook_attn_scores"):
            pattern = cache[hook.replace("attn_scores", "pattern")]
            if np.allclose(theirs, pattern, atol=1e-12):
                # TransformerLens 4.3's bridge fires hook_attn_scores post hoc with the weights
                # the attention module returns, i.e. after the softmax (see to_transformer_lens).
                continue
            assert np.all(np.isneginf(theirs[..., ~mask])) and np.all(np.isneginf(ours[..., ~mask]))
            np.testing.assert_allclose(theirs[..., mask], ours[..., mask], atol=1e-12)
        elif hook.endswith("hook_normalized"):
            # TransformerLens records x_hat before the gain and bias; we record after.
            ln = hook.rsplit(".", 1)[0]
            w, b = model.tensors[ln + ".w"], model.tensors[ln + ".b"]
            np.testing.assert_allclose(theirs * w + b, ours, atol=1e-12, err_msg=hook)
        else:
            np.testing.assert_allclose(theirs, ours, atol=1e-12, err_msg=hook)


@pytest.mark.parametrize("name", ["paper-2d", "simulator-16d"])
def test_circuit_singular_values_equal_transformer_lens(name):
    cfg = preset(name, 12)
    model = random_model(cfg)
    bridge = to_transformer_lens(model)
    for c in head_circuits(model):
        with torch.no_grad():
            qk = bridge.QK[c.layer, c.head].S.numpy()
            ov = bridge.OV[c.layer, c.head].S.numpy()
        r = cfg.d_head
        np.testing.assert_allclose(c.qk_singular[:r], qk[:r], atol=1e-10)
        # Without W_O, TransformerLens's OV is W_V times identity blocks: the same spectrum.
        np.testing.assert_allclose(c.ov_singular[:r], ov[:r], atol=1e-10)


@pytest.mark.parametrize("name", ["paper-2d", "simulator-16d", "paper-2d-2layer"])
def test_our_logit_decomposition_matches_transformer_lens(name):
    from flatformer.analysis.lens import contributions

    cfg = preset(name, 12)
    model = random_model(cfg)
    tokens = tokens_for(cfg, batch=3)
    with torch.no_grad():
        _, tl_cache = to_transformer_lens(model).run_with_cache(torch.tensor(tokens))
        parts, labels = tl_cache.decompose_resid(return_labels=True)
        heads, head_labels = tl_cache.stack_head_results(layer=-1, return_labels=True)
    W_U = model.tensors["unembed.W_U"]
    ours = contributions(model, tokens, by_head=False)
    for part, label in zip(parts.numpy(), labels):
        name_ = {"embed": "embed", "pos_embed": "pos"}.get(label)
        if name_ is None:
            layer, kind = label.split("_", 1)  # "0_attn_out", "0_mlp_out"
            name_ = f"{layer}.attn" if kind == "attn_out" else f"{layer}.mlp"
            if kind == "mlp_out":  # ours splits off the bias b_out
                np.testing.assert_allclose(
                    part @ W_U, ours[name_] + ours[name_ + " bias"], atol=1e-12
                )
                continue
        np.testing.assert_allclose(part @ W_U, ours[name_], atol=1e-12, err_msg=label)
    per_head = contributions(model, tokens)
    for part, label in zip(heads.numpy(), head_labels):  # "L0H1"
        layer, head = label[1:].split("H")
        np.testing.assert_allclose(part @ W_U, per_head[f"{layer}.head {head}"], atol=1e-12)
