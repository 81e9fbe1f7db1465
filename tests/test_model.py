"""The engine against PyTorch autograd, the hook-name contract, and config validation."""

import numpy as np
import pytest
import torch

from flatformer.bridge import TorchTransformer
from flatformer.config import ModelConfig, preset
from flatformer.errors import FlatformerError
from flatformer.engine.model import (
    backward,
    cross_entropy,
    forward,
    hook_names,
    init_params,
)
from flatformer.transformer import Transformer


def random_batch(cfg, S=3, B=4, seed=0):
    rng = np.random.default_rng(seed)
    params = init_params(cfg, [np.random.default_rng([seed, s]) for s in range(S)])
    for name, view in params.views.items():
        if "ln" in name:
            view += 0.3 * rng.standard_normal(view.shape)
    tokens = rng.integers(0, cfg.d_vocab, (S, B, cfg.n_ctx))
    targets = rng.integers(0, cfg.vocab_out, tokens.shape)
    weights = (rng.random(tokens.shape) > 0.3).astype(float)
    return params, tokens, targets, weights


def test_parameter_counts_match_the_sources():
    assert preset("paper-2d", 12).n_params == 250
    assert preset("simulator-16d", 28).n_params == 3184


def test_logits_and_gradients_equal_autograd(cfg):
    params, tokens, targets, weights = random_batch(cfg)
    logits, cache = forward(params, tokens)
    loss, dlogits = cross_entropy(logits, targets, weights)
    grads = backward(params, cache, dlogits)
    for s in range(params.n_seeds):
        oracle = TorchTransformer(cfg, params.seed(s))
        t_logits = oracle(torch.tensor(tokens[s]))
        np.testing.assert_allclose(t_logits.detach().numpy(), logits[s], atol=1e-12, rtol=0)
        nll = torch.nn.functional.cross_entropy(
            t_logits.reshape(-1, cfg.vocab_out),
            torch.tensor(targets[s]).reshape(-1),
            reduction="none",
        )
        w = torch.tensor(weights[s].reshape(-1))
        t_loss = (nll * w).sum() / w.sum()
        assert abs(t_loss.item() - loss[s]) < 1e-12
        t_loss.backward()
        for name in cfg.param_shapes():
            np.testing.assert_allclose(
                oracle.p(name).grad.numpy(), grads[name][s], atol=1e-10, rtol=0, err_msg=name
            )


@pytest.mark.parametrize("read", [[2], [0, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]])
def test_reading_only_some_positions_gives_the_full_gradients(cfg, read):
    """The training path for losses that read only some positions (forward's `read`) gives the
    logits there and every gradient of the full forward and backward passes, to 1e-12."""
    params, tokens, targets, weights = random_batch(cfg)
    read = np.array([t for t in read if t < cfg.n_ctx])
    weights[..., np.setdiff1d(np.arange(cfg.n_ctx), read)] = 0.0
    logits, cache = forward(params, tokens)
    loss, dlogits = cross_entropy(logits, targets, weights)
    grads = backward(params, cache, dlogits)
    some, cache = forward(params, tokens, read=read)
    some_loss, dsome = cross_entropy(some, targets[..., read], weights[..., read])
    some_grads = backward(params, cache, dsome)
    np.testing.assert_allclose(some, logits[:, :, read], rtol=1e-12, atol=0)
    np.testing.assert_allclose(some_loss, loss, rtol=1e-12, atol=0)
    scale = np.abs(grads.flat).max()  # relative to the largest (b_K's are 0 but for rounding)
    for name in cfg.param_shapes():
        np.testing.assert_allclose(
            some_grads[name], grads[name], rtol=0, atol=1e-12 * scale, err_msg=name
        )


def test_cache_matches_the_torch_hooks(cfg):
    params, tokens, _, _ = random_batch(cfg, S=1)
    model = Transformer(cfg, params.seed(0))
    _, cache = model.run_with_cache(tokens[0])
    _, t_cache = TorchTransformer(cfg, params.seed(0)).run_with_cache(torch.tensor(tokens[0]))
    assert list(cache) == list(t_cache) == hook_names(cfg)
    for name in cache:
        np.testing.assert_allclose(
            np.asarray(t_cache[name].detach()), cache[name], atol=1e-12, err_msg=name
        )


def test_hook_names_are_pinned():
    block = [
        "blocks.0.hook_resid_pre",
        "blocks.0.attn.hook_q",
        "blocks.0.attn.hook_k",
        "blocks.0.attn.hook_v",
        "blocks.0.attn.hook_attn_scores",
        "blocks.0.attn.hook_pattern",
        "blocks.0.attn.hook_z",
        "blocks.0.hook_attn_out",
        "blocks.0.hook_resid_mid",
        "blocks.0.mlp.hook_pre",
        "blocks.0.mlp.hook_post",
        "blocks.0.hook_mlp_out",
        "blocks.0.hook_resid_post",
    ]
    assert hook_names(preset("paper-2d", 12)) == ["hook_embed", "hook_pos_embed", *block]
    assert hook_names(preset("simulator-16d", 28)) == [
        "hook_embed",
        "hook_pos_embed",
        "blocks.0.hook_resid_pre",
        "blocks.0.ln1.hook_scale",
        "blocks.0.ln1.hook_normalized",
        *block[1:9],
        "blocks.0.ln2.hook_scale",
        "blocks.0.ln2.hook_normalized",
        *block[9:],
    ]
    two = hook_names(preset("paper-2d-2layer", 12))
    assert two[2:] == block + [n.replace("blocks.0", "blocks.1") for n in block]
    # Attention-only blocks end at hook_resid_post (no resid_mid, as TransformerLens's attn_only);
    # the final LayerNorm comes after the last block.
    attn_only = [*block[:8], "blocks.0.hook_resid_post"]
    assert hook_names(preset("paper-2d-2layer", 12, d_mlp=0, ln_final=True)) == [
        "hook_embed",
        "hook_pos_embed",
        *attn_only,
        *[n.replace("blocks.0", "blocks.1") for n in attn_only],
        "ln_final.hook_scale",
        "ln_final.hook_normalized",
    ]


def test_attention_only_blocks_and_the_final_layernorm_have_their_parameters():
    cfg = preset("paper-2d-2layer", 12, d_mlp=0, ln_final=True)
    names = list(cfg.param_shapes())
    assert cfg.attn_only and not any("mlp" in n or "ln2" in n for n in names)
    assert names[-4:] == ["ln_final.w", "ln_final.b", "unembed.W_U", "unembed.b_U"]
    mlp = 2 * 32 + 32 + 32 * 2 + 2  # W_in, b_in, W_out, b_out per block
    assert cfg.n_params == preset("paper-2d-2layer", 12).n_params - 2 * mlp + 2 * 2


def test_cache_shapes_follow_transformer_lens():
    cfg = preset("simulator-16d", 28)
    model = Transformer(cfg, init_params(cfg, [np.random.default_rng(0)]).seed(0))
    logits, cache = model.run_with_cache([[1, 2, 3, 4, 5]])
    assert logits.shape == (1, 5, 28)
    assert cache["blocks.0.attn.hook_q"].shape == (1, 5, 2, 8)
    assert cache["blocks.0.attn.hook_pattern"].shape == (1, 2, 5, 5)
    assert cache["blocks.0.attn.hook_z"].shape == (1, 5, 2, 8)
    assert cache["blocks.0.mlp.hook_post"].shape == (1, 5, 32)
    np.testing.assert_allclose(cache["blocks.0.attn.hook_pattern"].sum(-1), 1.0)
    assert np.all(np.triu(cache["blocks.0.attn.hook_pattern"][0, 0], 1) == 0)


def test_the_forward_pass_reads_like_the_paper():
    """e = x + p, z = e + Attn(e), h = z + FFN(z), logits = h W_U + b_U."""
    cfg = preset("paper-2d", 12)
    model = Transformer(cfg, init_params(cfg, [np.random.default_rng(1)]).seed(0))
    logits, c = model.run_with_cache([[4, 1, 11, 4, 6, 9, 5, 11]])
    e = c["hook_embed"] + c["hook_pos_embed"]
    np.testing.assert_allclose(c["blocks.0.hook_resid_pre"], e)
    np.testing.assert_allclose(c["blocks.0.hook_resid_mid"], e + c["blocks.0.hook_attn_out"])
    np.testing.assert_allclose(c["blocks.0.hook_attn_out"], c["blocks.0.attn.hook_z"][..., 0, :])
    h = c["blocks.0.hook_resid_mid"] + c["blocks.0.hook_mlp_out"]
    t = model.tensors
    np.testing.assert_allclose(logits, h @ t["unembed.W_U"] + t["unembed.b_U"])


def test_hooks_change_activations_downstream():
    cfg = preset("simulator-16d", 28)
    model = Transformer(cfg, init_params(cfg, [np.random.default_rng(2)]).seed(0))
    tokens = [[3, 1, 4, 1, 5, 9, 2, 6]]
    base = model(tokens)

    def head_off(z, name):
        z = z.copy()
        z[:, :, 0] = 0.0
        return z

    logits, cache = model.run_with_cache(tokens, hooks={"blocks.0.attn.hook_z": head_off})
    assert np.all(cache["blocks.0.attn.hook_z"][:, :, 0] == 0)
    assert np.abs(logits - base).max() > 1e-6
    with pytest.raises(FlatformerError, match="no activation named"):
        model.run_with_cache(tokens, hooks={"blocks.0.hook_nope": head_off})


def test_a_hook_cannot_unmask_the_future():
    """A hook that zeroes every score (masked ones too) gives uniform attention over the keys a
    query may read, never over later ones."""
    cfg = preset("simulator-16d", 28)
    model = Transformer(cfg, init_params(cfg, [np.random.default_rng(3)]).seed(0))
    _, cache = model.run_with_cache(
        [[3, 1, 4, 1, 5]],
        hooks={"blocks.0.attn.hook_attn_scores": lambda x, name: np.zeros_like(x)},
    )
    T = 5
    np.testing.assert_allclose(
        cache["blocks.0.attn.hook_pattern"][0, 0],
        np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None],
    )


def test_float32_stays_float32_everywhere():
    """No silent upcast: every activation the forward pass records, the logits' gradient and
    every parameter gradient of a float32 model are float32."""
    cfg = preset("simulator-16d", 28)
    params, tokens, targets, weights = random_batch(cfg)
    params = params.like(params.flat.astype(np.float32))
    logits, cache = forward(params, tokens)
    assert logits.dtype == np.float32
    assert {
        name: a.dtype for name, a in cache.items() if a.dtype != np.float32 and name != "_tokens"
    } == {}
    loss, dlogits = cross_entropy(logits, targets, weights)  # float64 weights, as data gives
    assert loss.dtype == dlogits.dtype == np.float32
    assert backward(params, cache, dlogits).flat.dtype == np.float32


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(d_model=3), "n_heads \\* d_head must equal d_model"),
        (dict(act_fn="tanh"), "act_fn"),
        (dict(normalization="post_ln"), "normalization"),
        (dict(n_layers=0), "n_layers"),
        (dict(d_mlp=-1), "d_mlp must be a whole number in 0\\.\\."),
        (dict(ln_final="yes"), "ln_final must be true or false"),
        (dict(attn_coeff=1.5), "attn_coeff must be a number in \\[0, 1\\]"),
        (dict(attn_coeff=-0.1), "attn_coeff"),
        (dict(attn_coeff=True), "attn_coeff"),
        (dict(attn_coeff="half"), "attn_coeff"),
        (dict(attn_coeff=float("nan")), "attn_coeff"),
    ],
)
def test_config_validates_itself(bad, message):
    with pytest.raises(FlatformerError, match=message):
        preset("paper-2d", 12, **bad)
    assert ModelConfig(d_model=3, d_head=2, attn_out=True).n_params > 0


def test_tokens_outside_the_vocabulary_are_refused():
    cfg = preset("paper-2d", 12)
    model = Transformer(cfg, init_params(cfg, [np.random.default_rng(0)]).seed(0))
    with pytest.raises(FlatformerError, match="outside the vocabulary"):
        model([[1, 12]])
    with pytest.raises(FlatformerError, match="exceed the context"):
        model([list(range(9))])


def test_erf_equals_the_c_library_over_a_wide_grid_and_its_tails():
    import math

    from flatformer.engine.components import erf, gelu_erf

    x = np.concatenate(
        [
            np.linspace(-30, 30, 20001),
            np.geomspace(1e-300, 1e-3, 500),
            -np.geomspace(1e-300, 1e-3, 500),
            [0.0, -0.0, np.inf, -np.inf],
        ]
    )
    expected = np.array([math.erf(v) for v in x])
    assert np.array_equal(erf(x), expected)
    assert erf(x.astype(np.float32)).dtype == np.float32
    t = torch.tensor(x[np.isfinite(x)])
    np.testing.assert_allclose(
        gelu_erf(x[np.isfinite(x)]), torch.nn.functional.gelu(t).numpy(), atol=1e-15, rtol=1e-15
    )


def test_new_fields_stay_out_of_saved_configs_at_their_defaults():
    cfg = preset("simulator-16d", 28)
    assert "attn_out_bias" not in cfg.to_dict() and "d_vocab_out" not in cfg.to_dict()
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    imported = cfg.replace(attn_out_bias=True, d_vocab_out=20)
    assert imported.to_dict()["d_vocab_out"] == 20
    assert imported.param_shapes()["blocks.0.attn.b_O"] == (16,)
    assert imported.param_shapes()["unembed.W_U"] == (16, 20)
    with pytest.raises(FlatformerError, match="d_vocab_out"):
        cfg.replace(d_vocab_out=29)
    with pytest.raises(FlatformerError, match="attn_out_bias"):
        preset("paper-2d", 12, attn_out_bias=True)


def test_the_attention_rate_is_saved_only_when_it_is_not_1():
    cfg = preset("grokking-1l", 54)
    assert "attn_coeff" not in cfg.to_dict()
    mixed = cfg.replace(attn_coeff=0)
    assert mixed.attn_coeff == 0.0 and isinstance(mixed.attn_coeff, float)
    assert mixed.to_dict()["attn_coeff"] == 0.0
    assert ModelConfig.from_dict(mixed.to_dict()) == mixed
    assert ModelConfig.from_dict({**cfg.to_dict(), "attn_coeff": 1}) == cfg
