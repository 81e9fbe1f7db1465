"""Head scores and composition on hand-built weights that implement an induction circuit exactly,
checked against TransformerLens (its bridge's patterns and its own composition scores)."""

import json

import numpy as np
import pytest
import torch
from clitools import cli

from flatformer.analysis.induction import (
    composition_baseline,
    head_scores,
    locate_phase,
    loss_bump,
    repeated_tokens,
)
from flatformer.model.bridge import to_transformer_lens
from flatformer.commands.analyze import render_report
from flatformer.config import ModelConfig
from flatformer.store.runs import load_run
from flatformer.tasks import get_task
from flatformer.model.transformer import Transformer

V, T = 8, 16  # vocabulary, context; the residual: token | position | prev
D, DH, SHARP = 2 * V + T, T, 30.0


def induction_circuit() -> Transformer:
    """Layer 0 head 0: a previous-token head (position i's query matches position i - 1's key)
    that writes the token it attends to into a "previous token" subspace. Layer 1 head 0: an
    induction head whose query (the current token) matches keys whose previous token is the
    same (K-composition with head 0.0), and copies the key's token to the output. Head 0.1 has
    W_V = 0 (copying undefined); head 1.1 is small and random."""
    cfg = ModelConfig(
        d_model=D,
        n_heads=2,
        d_head=DH,
        n_layers=2,
        d_mlp=0,
        n_ctx=T,
        d_vocab=V,
        attn_out=True,
        unembed_bias=False,
    )
    rng = np.random.default_rng(0)
    t = {name: np.zeros(shape) for name, shape in cfg.param_shapes().items()}
    tok, pos, prev = np.arange(V), V + np.arange(T), V + T + np.arange(V)
    c = SHARP * np.sqrt(DH)
    t["embed.W_E"][tok, tok] = 1.0
    t["pos_embed.W_pos"][np.arange(T), pos] = 1.0
    t["unembed.W_U"][tok, tok] = 1.0
    b0, b1 = "blocks.0.attn.", "blocks.1.attn."
    t[b0 + "W_Q"][0, pos, np.arange(T)] = c  # query: my position i
    t[b0 + "W_K"][0, pos[:-1], np.arange(1, T)] = 1.0  # key at j answers to i = j + 1
    t[b0 + "W_V"][0, tok, tok] = 1.0
    t[b0 + "W_O"][0, tok, prev] = 1.0  # write: "my predecessor was v"
    t[b0 + "W_Q"][1] = rng.standard_normal((D, DH))
    t[b0 + "W_K"][1] = rng.standard_normal((D, DH))
    t[b0 + "W_O"][1] = rng.standard_normal((DH, D))  # W_V of head 0.1 stays 0
    t[b1 + "W_Q"][0, tok, tok] = c  # query: my token v
    t[b1 + "W_K"][0, prev, tok] = 1.0  # key: predecessor v
    t[b1 + "W_V"][0, tok, tok] = 1.0
    t[b1 + "W_O"][0, tok, tok] = 1.0  # copy the token
    for w, shape in (("W_Q", (D, DH)), ("W_K", (D, DH)), ("W_V", (D, DH)), ("W_O", (DH, D))):
        t[b1 + w][1] = 0.1 * rng.standard_normal(shape)
    return Transformer(cfg, t)


@pytest.fixture(scope="module")
def circuit():
    model = induction_circuit()
    return model, head_scores(model)


def test_scores_on_the_hand_built_circuit(circuit):
    model, scores = circuit
    assert scores.prev_token[0, 0] > 0.99 and scores.prefix_matching[1, 0] > 0.9
    assert scores.prev_token[1, 0] < 0.2 and scores.prefix_matching[0, 0] < 0.2
    assert scores.induction_pair() == ((0, 0), (1, 0))
    assert scores.strongest_k_pair() == ((0, 0), (1, 0))
    assert scores.copying[1][0] == pytest.approx(1.0, abs=1e-12)  # full OV = identity
    assert scores.copying[0][1] is None  # W_V = 0: undefined
    k = scores.composition["k"]
    assert np.nanargmax(k) == np.ravel_multi_index((0, 2), k.shape)  # 0.0 -> 1.0 is the largest
    # The prev-token head writes where the induction head's keys read, not its queries/values.
    assert scores.composition["q"][0, 2] == pytest.approx(0.0, abs=1e-12)
    assert scores.composition["v"][0, 2] == pytest.approx(0.0, abs=1e-12)
    assert k[0, 2] == pytest.approx(1 / np.sqrt(V), abs=1e-12)  # V aligned directions
    assert np.isnan(k[0, 1]) and np.isnan(k[2, 0])  # same or later layer
    assert np.all(np.isnan(k[1]))  # from a W_V = 0 head
    json = scores.to_json()
    assert json["heads"][1]["copying"] is None and json["composition"]["k"][0][1] is None


def test_scores_equal_transformer_lens(circuit):
    model, scores = circuit
    tokens, n = repeated_tokens(model.cfg)
    bridge = to_transformer_lens(model)
    with torch.no_grad():
        _, cache = bridge.run_with_cache(torch.tensor(tokens))
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"].numpy()
        for h in range(2):
            prev = np.mean(
                [pattern[b, h, i, i - 1] for b in range(len(tokens)) for i in range(1, 2 * n)]
            )
            # the position right after the earlier occurrence, found by searching the tokens
            prefix = np.mean(
                [
                    pattern[b, h, i, list(tokens[b]).index(tokens[b, i]) + 1]
                    for b in range(len(tokens))
                    for i in range(n, 2 * n)
                ]
            )
            assert abs(prev - scores.prev_token[layer, h]) < 1e-9
            assert abs(prefix - scores.prefix_matching[layer, h]) < 1e-9
    for mode in "QKV":
        with torch.no_grad():
            theirs = bridge.all_composition_scores(mode).scores.numpy()  # (L, H, L, H)
        ours = scores.composition[mode.lower()].reshape(2, 2, 2, 2)
        defined = ~np.isnan(ours)
        np.testing.assert_allclose(ours[defined], theirs[defined], atol=1e-9)


def test_the_baseline_is_what_random_heads_give():
    cfg = induction_circuit().cfg
    base = composition_baseline(cfg)
    assert 0.0 < base < 1 / np.sqrt(V) and base == composition_baseline(cfg)


def test_the_phase_step_and_the_bump():
    steps = [0, 100, 200, 300, 400, 500]
    assert locate_phase(steps, np.array([0.1, 0.1, 0.15, 0.6, 0.8, 0.8])) == 300
    assert loss_bump(steps, [3.0, 2.5, 2.6, 2.4, 1.0, 0.9], 300) == 200
    assert loss_bump(steps, [3.0, 2.5, 2.4, 2.3, 1.0, 0.9], 300) is None


def test_the_induction_task_obeys_its_rule():
    task = get_task("induction")
    rng = np.random.default_rng(0)
    forced = 0
    for _ in range(300):
        seq = np.array(task.sample(rng))
        target, source = task.rule(seq)
        assert task.min_len <= len(seq) <= task.max_len
        assert np.all(target[target >= 0] == seq[target >= 0])
        assert np.all(source[target >= 0] < np.flatnonzero(target >= 0))
        forced += int((target >= 0).sum())
    assert forced > 300 * 10
    # The docstring's example: `c h a e b a e b a`, forced from position 7 on.
    target, source = task.rule(np.array(task.encode("c h a e b a e b a")))
    assert target.tolist() == [-1] * 7 + task.encode("b a")
    assert source.tolist() == [-1] * 7 + [2, 3]


def test_analyze_json_reports_the_induction_block(induction_run, capsys):
    result = cli("analyze", induction_run, "--json")
    assert result.returncode == 0, result.stderr
    block = json.loads(result.stdout)["induction"]
    assert isinstance(block["phase_step"], int) and block["phase_step"] in (0, 100, 200, 300)
    heads = block["heads"]
    assert [(x["layer"], x["head"]) for x in heads] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    scores = head_scores(load_run(induction_run).model())
    for x in heads:
        assert x["prev_token"] == scores.prev_token[x["layer"], x["head"]]
        assert x["prefix_matching"] == scores.prefix_matching[x["layer"], x["head"]]
    comp = block["composition"]
    assert set(comp) == {"q", "k", "v", "baseline"} and len(comp["k"]) == 4
    assert comp["k"][0][2] is not None and comp["k"][2][0] is None
    render_report(json.loads(result.stdout))  # the text `analyze` prints, from the same report
    assert "Induction heads" in capsys.readouterr().out


def test_the_phase_figure_and_the_movie(induction_run, tmp_path):
    result = cli("figures", induction_run, "--only", "induction_phase_change", "--out", tmp_path)
    assert result.returncode == 0 and (tmp_path / "induction_phase_change.png").is_file()
    result = cli("animate", induction_run, "--movies", "mov7", "--format", "gif", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "mov7_induction_attention.gif").stat().st_size > 0
