"""Sampling: temperature, top-k, top-p, the seeded draw, greedy, and the sliding window."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flatformer.readout.sampling import distribution, draw, entropy, generate
from flatformer.errors import FlatformerError
from flatformer.store.runs import load_run

logits_strategy = st.lists(st.floats(-20, 20), min_size=2, max_size=14).map(np.array)


def test_temperature_is_a_softmax_of_scaled_logits():
    logits = np.array([2.0, -1.0, 0.5, 0.5])
    for T in (0.3, 1.0, 4.0):
        z = sum(math.exp(v / T) for v in logits)
        np.testing.assert_allclose(
            distribution(logits, T), [math.exp(v / T) / z for v in logits], atol=1e-15
        )
    np.testing.assert_array_equal(distribution(logits, 0.0), [1, 0, 0, 0])


@given(logits_strategy, st.integers(1, 16))
@settings(max_examples=200, deadline=None)
def test_top_k_keeps_the_k_likeliest_and_top_k_1_is_greedy(logits, k):
    probs = distribution(logits, 1.0, top_k=k)
    assert abs(probs.sum() - 1) < 1e-12
    kept = np.flatnonzero(probs > 0)
    assert len(kept) <= min(k, len(logits))
    # Nothing dropped is likelier than anything kept.
    dropped = np.setdiff1d(np.arange(len(logits)), kept)
    if len(dropped) and len(kept):
        assert logits[dropped].max() <= logits[kept].min()
    if k == 1:
        assert kept.tolist() == [int(np.argmax(logits))]


def test_top_k_ties_go_to_the_lower_index():
    assert np.flatnonzero(distribution(np.array([1.0, 3.0, 3.0, 3.0]), top_k=2)).tolist() == [1, 2]


@given(logits_strategy, st.floats(0.01, 1.0))
@settings(max_examples=200, deadline=None)
def test_top_p_keeps_the_smallest_likeliest_set_reaching_p(logits, p):
    probs = distribution(logits, 1.0, top_p=p)
    full = distribution(logits, 1.0)
    kept = probs > 0
    # Brute force over prefixes of the likeliest-first order.
    order = np.argsort(-logits, kind="stable")
    n = next(
        i
        for i in range(1, len(order) + 1)
        if full[order[:i]].sum() >= p * (1 - 1e-12) or i == len(order)
    )
    assert sorted(np.flatnonzero(kept)) == sorted(order[:n])
    np.testing.assert_allclose(probs[kept], full[kept] / full[kept].sum(), atol=1e-12)


def test_draw_is_the_inverse_cdf():
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    for u, token in [(0.0, 0), (0.0999, 0), (0.1, 2), (0.69, 2), (0.7, 3), (0.9999999, 3)]:
        assert draw(probs, u) == token
    # The empirical frequencies of many draws match the probabilities.
    rng = np.random.default_rng(0)
    counts = np.bincount([draw(probs, rng.random()) for _ in range(20000)], minlength=4)
    np.testing.assert_allclose(counts / 20000, probs, atol=0.01)
    assert entropy(np.array([0.5, 0.5, 0.0])) == pytest.approx(math.log(2))


def test_bad_settings_are_one_line_errors():
    for kwargs in ({"temperature": -1}, {"top_k": 0}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(FlatformerError):
            distribution(np.zeros(3), **{"temperature": 1.0, **kwargs})


def test_generation_is_seeded_and_top_k_1_is_greedy(paper_run):
    model = load_run(paper_run).model()
    prompt = [4, 1, 11, 4, 6]
    first = [s.token for s in generate(model, prompt, 20, seed=7)]
    assert first == [s.token for s in generate(model, prompt, 20, seed=7)]
    assert first != [s.token for s in generate(model, prompt, 20, seed=8)]
    greedy = [s.token for s in generate(model, prompt, 20, greedy=True)]
    assert [s.token for s in generate(model, prompt, 20, top_k=1, seed=3)] == greedy
    assert [s.token for s in generate(model, prompt, 20, temperature=0)] == greedy
    # Greedy by hand: feed the argmax back, reading the last n_ctx tokens.
    seq = list(prompt)
    for _ in range(20):
        seq.append(int(model(np.array(seq[-8:]))[0, -1].argmax()))
    assert seq[len(prompt) :] == greedy


def test_a_prompt_longer_than_the_context_slides_the_window(paper_run):
    model = load_run(paper_run).model()
    long = [3, 5, 7, 9, 4, 1, 11, 4, 6, 9, 5, 11]
    steps = generate(model, long, 6, seed=1)
    assert [s.token for s in steps] == [s.token for s in generate(model, long[-8:], 6, seed=1)]
    assert all(s.position == 7 for s in steps)
    # The paper's demo: the `+` after 4 6 9 5 retrieves 6.
    assert generate(model, [4, 1, 11, 4, 6, 9, 5, 11], 1, greedy=True)[0].token == 6
    with pytest.raises(FlatformerError):
        generate(model, [3, 99], 2)


def test_generation_uses_the_switched_model(paper_run):
    from flatformer.readout.knobs import switches, zero_head

    model = load_run(paper_run).model()
    prompt = [4, 1, 11, 4, 6, 9, 5, 11]
    hooks = switches(model.cfg, heads_off=[(0, 0)])
    steps = generate(model, prompt, 6, greedy=True, hooks=hooks)
    seq = list(prompt)
    for _ in range(6):
        seq.append(int(model(np.array(seq[-8:]), zero_head(0, 0))[0, -1].argmax()))
    assert [s.token for s in steps] == seq[8:]
    # Without its head the model cannot retrieve the 6.
    assert steps[0].token != 6
    for bad in (
        {"heads_off": [(0, 1)]},
        {"heads_off": [(1, 0)]},
        {"mlps_off": [2]},
        {"beta": float("nan")},
    ):
        with pytest.raises(FlatformerError):
            switches(model.cfg, **bad)
