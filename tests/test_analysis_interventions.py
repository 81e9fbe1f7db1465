"""Interventions against oracles: the same change made to the weights, and KL by hand."""

import math

import numpy as np
import pytest

from flatformer.analysis.interventions import patch, patching_sweep
from flatformer.readout.batches import next_token_logits
from flatformer.readout.knobs import (
    combine,
    head_means,
    knob_kls,
    mean_head,
    mlp_off,
    positions_off,
    scale_scores,
    standard_knobs,
    switches,
    zero_head,
)
from flatformer.readout.probs import kl_divergence
from flatformer.errors import FlatformerError
from flatformer.engine.model import init_params
from flatformer.store.runs import load_run
from flatformer.model.transformer import Transformer

from conftest import CONFIGS, random_model


@pytest.fixture(params=list(CONFIGS))
def model(request):
    return random_model(CONFIGS[request.param], 3)


def tokens_for(cfg, batch=5, seed=0):
    return np.random.default_rng(seed).integers(0, cfg.d_vocab, (batch, cfg.n_ctx))


def edited(model, **changes):
    """The same model with some weights replaced by `fn(tensor)`."""
    tensors = model.tensors
    for name, fn in changes.items():
        tensors[name] = fn(tensors[name])
    return Transformer(model.cfg, tensors)


def zero_rows(h):
    def fn(t):
        t = t.copy()
        t[h] = 0.0
        return t

    return fn


def test_zero_head_equals_zeroing_its_value_weights(model):
    cfg, tokens = model.cfg, tokens_for(model.cfg)
    for layer in range(cfg.n_layers):
        for h in range(cfg.n_heads):
            changes = {f"blocks.{layer}.attn.W_V": zero_rows(h)}
            if cfg.qkv_bias:  # with a value bias, z = pattern @ (x W_V + b_V): zero both
                changes[f"blocks.{layer}.attn.b_V"] = zero_rows(h)
            oracle = edited(model, **changes)
            np.testing.assert_allclose(
                model(tokens, zero_head(layer, h)), oracle(tokens), atol=1e-12
            )
            assert np.abs(model(tokens) - oracle(tokens)).max() > 1e-6


def test_mlp_off_equals_zero_output_weights(model):
    cfg, tokens = model.cfg, tokens_for(model.cfg)
    if cfg.attn_only:
        with pytest.raises(FlatformerError, match="attention-only"):
            switches(cfg, mlps_off=[0])
        return
    for layer in range(cfg.n_layers):
        oracle = edited(
            model,
            **{
                f"blocks.{layer}.mlp.W_out": np.zeros_like,
                f"blocks.{layer}.mlp.b_out": np.zeros_like,
            },
        )
        np.testing.assert_allclose(model(tokens, mlp_off(layer)), oracle(tokens), atol=1e-12)


def test_positions_off_equals_zero_position_embeddings(model):
    tokens = tokens_for(model.cfg)
    oracle = edited(model, **{"pos_embed.W_pos": np.zeros_like})
    np.testing.assert_allclose(model(tokens, positions_off()), oracle(tokens), atol=1e-12)


def test_beta_scaling_equals_scaling_the_query_weights(model):
    cfg, tokens = model.cfg, tokens_for(model.cfg)
    for beta in (0.0, 0.5, 3.0):
        # scores = (x W_Q + b_Q) . k / sqrt(dh): scaling W_Q and b_Q by beta scales every score.
        changes = {
            f"blocks.{layer}.attn.{w}": (lambda b: lambda t: b * t)(beta)
            for layer in range(cfg.n_layers)
            for w in ("W_Q", "b_Q")
            if w == "W_Q" or cfg.qkv_bias
        }
        hooks = scale_scores(beta, n_layers=cfg.n_layers)
        np.testing.assert_allclose(
            model(tokens, hooks), edited(model, **changes)(tokens), atol=1e-10
        )
    unchanged = model(tokens, scale_scores(1.0, n_layers=cfg.n_layers))
    assert np.all(kl_divergence(model(tokens), unchanged) == 0)


def test_beta_zero_is_uniform_over_visible_keys_and_keeps_the_mask():
    cfg = CONFIGS["simulator-16d"]
    model = Transformer(cfg, init_params(cfg, [np.random.default_rng(0)]).seed(0))
    _, cache = model.run_with_cache(tokens_for(cfg), scale_scores(0.0))
    pattern = cache["blocks.0.attn.hook_pattern"]
    expected = np.tril(np.ones((cfg.n_ctx, cfg.n_ctx))) / np.arange(1, cfg.n_ctx + 1)[:, None]
    np.testing.assert_allclose(pattern, np.broadcast_to(expected, pattern.shape), atol=1e-15)
    assert not np.isnan(cache["blocks.0.attn.hook_attn_scores"]).any()


def test_mean_ablation_against_its_own_prompt_changes_nothing(model):
    tokens = tokens_for(model.cfg, batch=1)
    means = head_means(model, tokens)
    # The mean over a batch of one sequence is that sequence's own z.
    np.testing.assert_allclose(model(tokens, mean_head(0, 0, means)), model(tokens), atol=1e-12)
    reference = tokens_for(model.cfg, batch=40, seed=1)
    means = head_means(model, reference)
    by_hand = np.mean(
        [model.run_with_cache(r)[1]["blocks.0.attn.hook_z"][0] for r in reference], axis=0
    )
    np.testing.assert_allclose(means[0], by_hand, atol=1e-12)
    _, cache = model.run_with_cache(tokens, mean_head(0, 0, means))
    np.testing.assert_allclose(cache["blocks.0.attn.hook_z"][0, :, 0], by_hand[:, 0], atol=1e-12)


def test_kl_equals_the_direct_formula():
    rng = np.random.default_rng(0)
    p_logits, q_logits = rng.normal(0, 3, (7, 12)), rng.normal(0, 3, (7, 12))
    kl = kl_divergence(p_logits, q_logits)
    for i in range(7):
        zp = sum(math.exp(v) for v in p_logits[i])
        zq = sum(math.exp(v) for v in q_logits[i])
        direct = sum(
            math.exp(a) / zp * (math.log(math.exp(a) / zp) - math.log(math.exp(b) / zq))
            for a, b in zip(p_logits[i], q_logits[i])
        )
        assert abs(kl[i] - direct) < 1e-12
    assert np.all(kl_divergence(p_logits, p_logits + 5.0) < 1e-15)  # a constant shift: no change


def test_combined_hooks_on_one_activation_compose():
    cfg = CONFIGS["simulator-16d"]
    model = Transformer(cfg, init_params(cfg, [np.random.default_rng(0)]).seed(0))
    tokens = tokens_for(cfg)
    both = combine(zero_head(0, 0), zero_head(0, 1))
    oracle = edited(model, **{"blocks.0.attn.W_V": np.zeros_like})
    np.testing.assert_allclose(model(tokens, both), oracle(tokens), atol=1e-12)


def test_next_token_logits_handles_prompts_of_any_length(model):
    prompts = [tokens_for(model.cfg, 1, s)[0][:n] for s, n in enumerate([3, 8, 1, 3, 5])]
    logits = next_token_logits(model, prompts)
    for prompt, row in zip(prompts, logits):
        np.testing.assert_allclose(row, model(prompt)[0, -1], atol=1e-13)


def test_patching_the_whole_stream_gives_the_clean_run(model):
    cfg = model.cfg
    clean, corrupt = tokens_for(cfg, 2, 0), tokens_for(cfg, 2, 1)
    clean_logits, clean_cache = model.run_with_cache(clean)
    np.testing.assert_allclose(
        model(corrupt, patch(clean_cache, "blocks.0.hook_resid_pre")), clean_logits, atol=1e-12
    )
    # One head's z at one position: exactly that slice changes in the patched run.
    _, cache = model.run_with_cache(corrupt, patch(clean_cache, "blocks.0.attn.hook_z", 3, 0))
    z, corrupt_z = (
        cache["blocks.0.attn.hook_z"],
        model.run_with_cache(corrupt)[1]["blocks.0.attn.hook_z"],
    )
    np.testing.assert_array_equal(z[:, 3, 0], clean_cache["blocks.0.attn.hook_z"][:, 3, 0])
    changed = np.any(z != corrupt_z, axis=(0, 3))
    assert changed[3, 0] and changed.sum() == 1
    with pytest.raises(FlatformerError):
        model(clean[:, :4], patch(clean_cache, "blocks.0.hook_resid_pre"))


def test_patching_sweep_finds_the_one_token_that_differs(paper_run):
    run = load_run(paper_run)
    model, task = run.model(), run.task
    clean, corrupt = task.encode("4 1 + 4 6 9 5 +"), task.encode("4 1 + 4 8 9 5 +")
    names, restored, kl = patching_sweep(model, clean, corrupt)
    assert names[0] == "blocks.0.hook_resid_pre"
    # Before attention, only position 4 (6 vs 8) differs: patching it restores the clean answer
    # fully, patching any other position changes nothing. After attention only the last
    # position feeds the prediction.
    np.testing.assert_allclose(restored[0], np.eye(8)[4], atol=1e-9)
    np.testing.assert_allclose(restored[1:], np.tile(np.eye(8)[7], (2, 1)), atol=1e-9)
    assert kl[0, 4] < 1e-9 and np.all(kl[0, [0, 1, 2, 3, 5, 6, 7]] > 1)


def test_every_knob_reports_a_kl_on_the_paper_model(paper_run):
    run = load_run(paper_run)
    model, task = run.model(), run.task
    prompts = [np.array(task.encode(p)) for p in ("4 1 + 4 6 9 5 +", "2 +", "6 3 3 + 6 7 +")]
    knobs = standard_knobs(model, tokens_for(model.cfg, 64))
    kls = knob_kls(model, prompts, knobs)
    names = set(kls)
    assert {
        "head 0.0 zero",
        "head 0.0 mean",
        "mlp 0 off",
        "positions off",
        "beta 0",
        "beta 3",
    } <= names
    for name, values in kls.items():
        assert values.shape == (3,) and np.all(np.isfinite(values)) and np.all(values >= 0), name
    # The head is the whole retrieval: switching it off moves every `+` prediction.
    assert kls["head 0.0 zero"].min() > 0.1
