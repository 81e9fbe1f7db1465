"""The logit lens and the logit decomposition: exact, and adding up to the logits."""

import numpy as np
import pytest

from flatformer.analysis.lens import contributions, lens_note, lens_summary, logit_lens, stage_names
from flatformer.config import preset
from flatformer.engine.model import init_params
from flatformer.store.runs import load_run
from flatformer.model.transformer import Transformer

from conftest import CONFIGS, random_model

CONFIGS = {**CONFIGS, "4d-2head": preset("small-4d-2head", 12)}


@pytest.fixture(params=list(CONFIGS))
def model(request):
    return random_model(CONFIGS[request.param], 5)


def tokens_for(cfg, batch=4):
    return np.random.default_rng(1).integers(0, cfg.d_vocab, (batch, cfg.n_ctx))


def test_contributions_sum_exactly_to_the_logits(model):
    tokens = tokens_for(model.cfg)
    logits = model(tokens)
    for by_head in (True, False):
        terms = contributions(model, tokens, by_head=by_head)
        np.testing.assert_allclose(sum(terms.values()), logits, atol=1e-12)
    names = list(contributions(model, tokens))
    cfg = model.cfg
    expected = ["embed", "pos"]
    for layer in range(cfg.n_layers):
        expected += [f"{layer}.head {h}" for h in range(cfg.n_heads)]
        expected += [f"{layer}.attn bias"] if cfg.attn_out_bias else []
        expected += [] if cfg.attn_only else [f"{layer}.mlp", f"{layer}.mlp bias"]
    expected += ["ln_final bias"] if cfg.ln_final else []
    assert names == expected + (["bias"] if cfg.unembed_bias else [])


def test_head_terms_add_up_to_the_attention_output(model):
    tokens = tokens_for(model.cfg)
    heads, whole = contributions(model, tokens), contributions(model, tokens, by_head=False)
    for layer in range(model.cfg.n_layers):
        summed = sum(heads[f"{layer}.head {h}"] for h in range(model.cfg.n_heads))
        summed = summed + heads.get(f"{layer}.attn bias", 0)  # b_O, with attn_out_bias
        np.testing.assert_allclose(summed, whole[f"{layer}.attn"], atol=1e-12)


def test_each_lens_stage_is_the_stream_times_the_unembedding(model):
    cfg, t = model.cfg, model.tensors
    tokens = tokens_for(cfg)
    lens = logit_lens(model, tokens)
    assert list(lens) == [label for label, _ in stage_names(model)]
    # After the embeddings, by hand: (W_E[token] + W_pos[position]) W_U + b_U.
    stream = t["embed.W_E"][tokens] + t["pos_embed.W_pos"][: cfg.n_ctx]
    if cfg.ln_final:  # (x - mean) / sqrt(var + eps) * w + b, recomputed on this stream
        centred = stream - stream.mean(-1, keepdims=True)
        stream = (
            centred / np.sqrt(centred.var(-1, keepdims=True) + 1e-5) * t["ln_final.w"]
            + t["ln_final.b"]
        )
    bias = t["unembed.b_U"] if cfg.unembed_bias else 0.0
    np.testing.assert_allclose(lens["embed"], stream @ t["unembed.W_U"] + bias, atol=1e-12)
    # The last stage is the model's output.
    np.testing.assert_array_equal(lens[stage_names(model)[-1][0]], model(tokens))


def test_the_lens_says_why_it_is_exact():
    plane = Transformer(
        CONFIGS["paper-2d"], init_params(CONFIGS["paper-2d"], [np.random.default_rng(0)]).seed(0)
    )
    sim = Transformer(
        CONFIGS["simulator-16d"],
        init_params(CONFIGS["simulator-16d"], [np.random.default_rng(0)]).seed(0),
    )
    assert "no final LayerNorm" in lens_note(plane) and "inside" not in lens_note(plane)
    assert "LayerNorms sit inside" in lens_note(sim) and "no final LayerNorm" in lens_note(sim)


def test_lens_summary_on_the_simulator_run(simulator_run):
    model = load_run(simulator_run).model()
    prompts = [p for p in tokens_for(model.cfg, 20)] + [np.array([3, 11, 4])]
    rows = lens_summary(model, prompts)
    assert [r["stage"] for r in rows] == ["embed", "0.attn", "0.mlp"]
    assert rows[-1]["agrees"] == 1.0 and rows[-1]["kl"] == 0.0
    # Against a loop over the prompts one by one.
    for row in rows[:-1]:
        agree = []
        for p in prompts:
            lens = logit_lens(model, p)
            agree.append(lens[row["stage"]][0, -1].argmax() == model(p)[0, -1].argmax())
        assert row["agrees"] == pytest.approx(np.mean(agree))
