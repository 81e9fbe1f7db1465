"""Grokking: the modular-addition task's data path, the Fourier basis and spectrum on weights
built to hold known frequencies, restricted and excluded loss on logits whose answer is known,
the clock/pizza measures, and the numbers over a short run's checkpoints."""

import numpy as np
import pytest

from clitools import assert_one_line_error, cli
from flatformer.analysis import grokking as G
from flatformer.config import preset
from flatformer.tasks.windows import TaskData
from flatformer.errors import FlatformerError
from flatformer.training.evaluate import evaluate
from flatformer.training.jobs import build_job
from flatformer.engine.model import Params, forward, init_params
from flatformer.store.runs import load_run
from flatformer.tasks import get_task

P = 13


def wave(k, x, phase=0.0):
    return np.cos(2 * np.pi * k * np.asarray(x) / P + phase)


def test_the_split_covers_every_pair_once_and_the_loss_counts_only_the_answer():
    task = get_task("modular-addition", {"p": P, "train_fraction": 0.3})
    data = TaskData.build(task, 3)
    n_train = round(0.3 * P * P)
    assert len(data.train_starts) == n_train and len(data.rule_targets) == P * P - n_train
    train, held = task.pairs()
    assert sorted(np.concatenate([train, held]).tolist()) == list(range(P * P))
    # every window is `a b =`; only the prediction at `=` counts, and its target is a + b mod p
    inputs, targets, weights = data.train.windows(data.train_starts, 3, False)
    assert (inputs[:, 2] == P).all() and (weights == [0, 0, 1]).all()
    assert (targets[:, 2] == (inputs[:, 0] + inputs[:, 1]) % P).all()
    assert (data.val_weights == [0, 0, 1]).all() and len(data.val_inputs) == len(held)
    assert (data.rule_index == 2).all()
    assert set(map(tuple, data.rule_inputs[:, :2])) == {divmod(int(i), P) for i in held}
    # the held-out loss is the mean cross-entropy at `=` over every held-out pair
    cfg = preset("grokking-1l", P + 1, d_model=8, d_head=2, d_mlp=8)
    params = init_params(cfg, [np.random.default_rng(0)])
    loss, error = evaluate(params, data)
    logits = G.pair_logits(params, P)[0]
    targets = (G.all_pairs(P)[:, 0] + G.all_pairs(P)[:, 1]) % P
    assert loss[0] == pytest.approx(G.losses(logits[held], targets[held]), abs=1e-12)
    assert error[0] == pytest.approx((logits[held].argmax(1) != targets[held]).mean(), abs=1e-12)


def test_task_settings_reach_the_run_and_bad_ones_are_refused(grokking_run, tmp_path):
    run = load_run(grokking_run)
    assert run.config["task_settings"] == {"p": P, "train_fraction": 0.3}  # both not default
    assert run.task.p == P and len(run.vocab) == P + 1 and run.cfg.n_ctx == 3
    assert run.config["recipe"]["full_batch"] and run.config["recipe"]["weight_decay"] == 1.0
    job, _ = build_job("modular-addition", None, None, 0, None, tmp_path / "x", [])
    assert (
        job.recipe.full_batch
        and job.cfg.d_vocab == 54
        and job.config_extra["recipe_name"] == "grokking"
        and job.task.train_fraction == 0.5
    )
    assert_one_line_error(
        cli("train", "modular-addition", "--set", "p=2", "--out", tmp_path / "a"), "p must be"
    )
    for name, sets, words in [
        ("modular-addition", ["train_fraction=1"], "train_fraction"),
        ("modular-addition", ["p=7.5"], "p must be"),
        ("modular-addition", ["n_ctx=8"], "n_ctx must be 3"),
        ("plus-last-even", ["p=7"], "unknown key 'p'"),
    ]:
        with pytest.raises(FlatformerError, match=words):
            build_job(name, None, None, 0, None, tmp_path / "b", sets)


def test_full_batch_training_memorises_the_training_pairs(grokking_run):
    """A short run of the data path: the full-batch loss falls and the training pairs are
    learned long before anything generalises (it does not grok in 400 steps)."""
    run = load_run(grokking_run)
    rows = run.metrics
    assert [r["step"] for r in rows][:3] == [0, 100, 200] and run.steps[-1] == 400
    result = G.progress(run)
    assert result["train_accuracy"][-1] == 1.0 and result["train_loss"][-1] < 0.1
    assert result["test_loss"][-1] > 1.0
    assert result["phases"]["memorisation"] <= 400
    assert rows[-1]["rule_error"] == pytest.approx(1 - result["test_accuracy"][-1], abs=1e-12)
    # the run evaluates in its float32 training precision, the analysis in float64
    assert run.config["recipe"]["dtype"] == "float32"
    assert rows[-1]["val_loss"] == pytest.approx(result["test_loss"][-1], rel=1e-6)


def test_fourier_basis_is_orthonormal_and_the_spectrum_finds_built_in_frequencies():
    basis, freqs = G.fourier_basis(P)
    np.testing.assert_allclose(basis @ basis.T, np.eye(P), atol=1e-12)
    assert freqs.tolist() == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
    even, even_freqs = G.fourier_basis(8)
    np.testing.assert_allclose(even @ even.T, np.eye(8), atol=1e-12)
    assert even_freqs.tolist() == [0, 1, 1, 2, 2, 3, 3, 4]
    # An embedding holding frequency 3 in two directions (amplitude 2, any phase), frequency 5
    # at amplitude 0.5 and a constant 1.5: a cosine of amplitude A has norm A sqrt(p / 2).
    x = np.arange(P)
    W = np.stack(
        [
            2 * wave(3, x, 0.7),
            2 * wave(3, x, 0.7 + np.pi / 2),
            0.5 * wave(5, x, 1.0),
            np.full(P, 1.5),
        ],
        1,
    )
    want = np.zeros(P // 2 + 1)
    want[3] = np.sqrt(2 * 4 * P / 2)
    want[5] = 0.5 * np.sqrt(P / 2)
    want[0] = 1.5 * np.sqrt(P)
    np.testing.assert_allclose(G.spectrum(W), want, atol=1e-12)


def clock_logits(freqs, amplitude=3.0):
    """Logits (p^2, p + 1) of the clock: sum_k A cos(w_k (a + b - c)), c over the outputs."""
    a, b = np.divmod(np.arange(P * P), P)
    c = np.arange(P + 1)
    return sum(amplitude * wave(k, (a + b)[:, None] - c[None, :]) for k in freqs)


def test_restricted_and_excluded_loss_on_logits_with_known_components():
    a, b = np.divmod(np.arange(P * P), P)
    target = (a + b) % P
    clock = clock_logits([2, 5])
    # Parts the restriction removes: waves in a alone and in a - b, and an offset per output.
    other = (
        1.3 * wave(4, a)[:, None] * np.linspace(-1, 1, P + 1)
        + 0.8 * wave(1, a - b)[:, None]
        + np.arange(P + 1) * 0.1
    )
    restricted = G.restricted_logits(clock + other, P, [2, 5])
    np.testing.assert_allclose(restricted, clock + np.arange(P + 1) * 0.1, atol=1e-10)
    # Removing the key frequencies leaves nothing of the clock: chance, ln(p + 1), when it was
    # all there was; and only the other parts when they were added.
    assert G.losses(G.excluded_logits(clock, P, [2, 5]), target) == pytest.approx(np.log(P + 1))
    np.testing.assert_allclose(G.excluded_logits(clock + other, P, [2, 5]), other, atol=1e-10)
    # Removing a frequency the logits do not use changes nothing.
    np.testing.assert_allclose(G.excluded_logits(clock, P, [3]), clock, atol=1e-10)


def test_key_frequencies_are_read_off_the_neuron_logit_map():
    """W_L = W_out W_U built to hold frequencies 2, 3, 5 and 1 with 50%, 30%, 15% and 5% of its
    energy, besides a large constant (ignored, as softmax ignores it) and an `=` column: the
    key frequencies are the fewest holding 90%, whatever the embedding holds."""
    cfg = preset("grokking-1l", P + 1, d_model=8, d_head=2, d_mlp=8)
    weights = {
        name: view[0].copy()
        for name, view in init_params(cfg, [np.random.default_rng(0)]).views.items()
    }
    c = np.arange(P)
    shares = {2: 0.5, 3: 0.3, 5: 0.15, 1: 0.05}
    # two neurons per frequency, a quarter turn apart: energy 2 A^2 p / 2 = A^2 p
    rows = [
        np.sqrt(share) * wave(k, c, phase)
        for k, share in shares.items()
        for phase in (0.3, 0.3 + np.pi / 2)
    ]
    W_L = np.array(rows) + 3.0
    mix = np.linalg.qr(np.random.default_rng(1).normal(size=(8, 8)))[0]
    weights["blocks.0.mlp.W_out"] = mix
    weights["unembed.W_U"][:, :P] = mix.T @ W_L
    weights["embed.W_E"][:P] = np.outer(wave(4, c), np.ones(8))  # the embedding holds only 4
    np.testing.assert_allclose(G.neuron_logit_map(weights, P), W_L, atol=1e-12)
    want = np.zeros(P // 2 + 1)
    want[0] = 9 * 8 * P
    for k, share in shares.items():
        want[k] = share * P
    np.testing.assert_allclose(G.spectrum(W_L.T) ** 2, want, atol=1e-9)
    assert G.key_frequencies(weights, P) == [2, 3, 5]
    assert G.key_frequencies(weights, P, share=0.75) == [2, 3]
    assert G.key_frequencies(weights, P, share=0.97) == [1, 2, 3, 5]
    # without an MLP, the logits are read through W_U alone
    no_mlp = {name: w for name, w in weights.items() if ".mlp." not in name}
    np.testing.assert_allclose(G.neuron_logit_map(no_mlp, P), mix.T @ W_L, atol=1e-12)


def test_distance_irrelevance_tells_the_pizza_from_the_clock():
    a, b = np.divmod(np.arange(P * P), P)
    logits = np.zeros((P * P, P + 1))
    # pizza: the correct logit depends only on a - b (|cos(w (a - b) / 2)|)
    logits[np.arange(P * P), (a + b) % P] = np.abs(np.cos(np.pi * 3 * (a - b) / P))
    assert G.distance_irrelevance(logits, P) == pytest.approx(0.0, abs=1e-12)
    # clock: it depends only on a + b, never on the distance
    logits[np.arange(P * P), (a + b) % P] = wave(2, a + b)
    assert G.distance_irrelevance(logits, P) == pytest.approx(1.0, abs=1e-12)


def test_input_gradients_match_central_differences():
    cfg = preset("grokking-1l", P + 1, d_model=8, d_head=2, d_mlp=16)
    params = init_params(cfg, [np.random.default_rng(3)])
    a, b, c = np.array([2, 7, 7]), np.array([5, 7, 1]), np.array([4, 0, 9])
    grads = G.input_gradients(params, a, b, c)  # (n, 2, d)
    eps = 1e-6
    for i in range(len(a)):
        tokens = np.array([[[a[i], b[i], P]]])
        for pos in range(2):
            for j in range(cfg.d_model):

                def shifted(sign):
                    def hook(x, name):
                        x = x.copy()
                        x[0, 0, pos, j] += sign * eps
                        return x

                    return forward(params, tokens, {"hook_embed": hook})[0][0, 0, 2, c[i]]

                numeric = (shifted(1) - shifted(-1)) / (2 * eps)
                assert grads[i, pos, j] == pytest.approx(numeric, abs=1e-7)
    # the measure is the mean cosine of the two gradients
    sym = G.gradient_symmetricity(params, P, n=20, seed=1)
    rng = np.random.default_rng(1)
    a, b, c = rng.integers(P, size=(3, 20))
    g = G.input_gradients(params, a, b, c)
    cos = (
        (g[:, 0] * g[:, 1]).sum(1)
        / np.linalg.norm(g[:, 0], axis=1)
        / np.linalg.norm(g[:, 1], axis=1)
    )
    assert sym == pytest.approx(cos.mean(), abs=1e-12)


def test_phases_and_falls_on_constructed_curves():
    steps = np.arange(0, 1100, 100)
    train_acc = [0.1, 0.6, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    test_loss = np.exp([1, 2, 3, 3, 2.9, 2.8, 2.0, 1.0, 0.0, -0.5, -0.7])  # peak 3, end -0.7
    test_acc = [0.0] * 7 + [0.5, 0.9, 0.99, 1.0]
    got = G.phases(steps, train_acc, test_loss, test_acc)
    # 10% of the way from 3 to -0.7 is 2.63 (first reached at step 600), 90% is -0.33 (900)
    assert got == {"memorisation": 200, "circuit_formation": 600, "cleanup": 900}
    assert G.falls_at(steps, np.exp([3.0] * 11), 0, 0.5) is None
    # halved: below half the peak after `after` (e^3 / 2 = e^2.31), whatever the final value
    assert G.halved_at(steps, test_loss, 200) == 600
    assert G.halved_at(steps, test_loss, 800) == 1000  # peak e^0: e^-0.5 is not below 1/2
    assert G.halved_at(steps, np.exp([3.0] * 11), 0) is None
    assert G.phases(steps, [0.5] * 11, test_loss, test_acc)["memorisation"] is None
    # a run that ends before 99% of the held-out pairs are right has not finished cleaning up
    assert G.phases(steps, train_acc, test_loss, test_acc[:-2] + [0.9, 0.95])["cleanup"] is None


def test_frequency_plane_puts_the_numbers_on_their_circle():
    x = np.arange(P)
    rng = np.random.default_rng(0)
    mix = np.linalg.qr(rng.normal(size=(6, 6)))[0]  # any orthonormal map into d = 6
    W = (
        np.stack(
            [
                wave(4, x),
                np.sin(2 * np.pi * 4 * x / P),
                0.2 * wave(1, x),
                np.zeros(P),
                np.zeros(P),
                np.zeros(P),
            ],
            1,
        )
        @ mix
    )
    angles = G.phases_of(W, 4)
    step = np.mod(np.diff(angles), 2 * np.pi)
    # consecutive numbers are 2 pi 4 / p apart (or the reflection of that)
    want = 2 * np.pi * 4 / P
    assert np.allclose(step, want, atol=1e-9) or np.allclose(step, 2 * np.pi - want, atol=1e-9)


def test_compare_reports_each_seeds_key_frequencies_and_algorithm(grokking_seeds):
    from flatformer.compare import compare_runs, to_json

    report = to_json(compare_runs(grokking_seeds))
    rows = report["grokking"]
    assert [r["seed"] for r in rows] == [0, 1, 2]
    for row in rows:
        run = load_run(grokking_seeds / f"seed_{row['seed']}")
        params = Params.stack(run.cfg, [run.weights()])
        logits = G.pair_logits(params, P)[0]
        assert row["key_frequencies"] == G.key_frequencies(run.weights(), P)
        assert row["distance_irrelevance"] == pytest.approx(G.distance_irrelevance(logits, P))
        assert row["name"] == "none"  # memorised, not generalised: no algorithm is named


def test_the_explorer_colours_numbers_by_their_key_phase(chromium, grokking_run, tmp_path):
    from flatformer.explorer.export import export_run
    from flatformer.explorer import render_html
    from test_explorer_browser import visit

    run = load_run(grokking_run)
    data = export_run(run)
    kp = data["key_phase"]
    embed = run.weights()["embed.W_E"][:P]
    np.testing.assert_allclose(
        kp["phase"], G.phases_of(embed, kp["frequency"]) / (2 * np.pi), atol=1e-12
    )
    assert kp["frequency"] in kp["key_frequencies"]
    path = tmp_path / "page.html"
    path.write_text(render_html(grokking_run), encoding="utf-8")
    with visit(chromium, path) as page:
        assert not page.query_selector(".banner.fail")
        before = page.evaluate("explorer.geometry()")["embed"]["tokenColours"]
        page.locator("#phase").check()
        page.wait_for_function("() => location.hash.includes('colour=phase')")
        after = page.evaluate("explorer.geometry()")["embed"]["tokenColours"]
    assert after != before
    hues = [int(c.split("(")[1].split(",")[0]) for c in after[:P]]
    assert hues == [round(360 * f) for f in kp["phase"]]
    assert after[P] == before[P]  # `=` keeps its own colour
