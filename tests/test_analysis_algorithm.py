"""The five steps measured, and the geometry they rest on, against brute force and the metric."""

import itertools

import numpy as np
import pytest

from flatformer.analysis.algorithm import (
    checks_for,
    class_separation,
    nudge,
    position_ladder,
    production,
    query_separation,
    recall_sources,
    recency,
    retrieval,
    run_checks,
)
from flatformer.analysis.hulls import hull_distance, ladder, min_norm_point, separation
from flatformer.tasks.windows import TaskData
from flatformer.training.evaluate import evaluate_run
from flatformer.store.runs import load_run
from flatformer.tasks import get_task


def _segment(a, b):
    d = b - a
    t = np.clip(-(a @ d) / max(d @ d, 1e-300), 0, 1)
    return np.linalg.norm(a + t * d)


def _triangle(a, b, c):
    def side(u, v):
        return u[0] * v[1] - u[1] * v[0]

    s = [side(b - a, -a), side(c - b, -b), side(a - c, -c)]
    if all(x >= 0 for x in s) or all(x <= 0 for x in s):
        return 0.0
    return min(_segment(a, b), _segment(b, c), _segment(a, c))


def brute_force_norm(P):
    """Distance from the origin to the hull of planar points: every hull point lies in a
    triangle of three of them (Caratheodory)."""
    best = min(np.linalg.norm(p) for p in P)
    for i, j in itertools.combinations(range(len(P)), 2):
        best = min(best, _segment(P[i], P[j]))
    for i, j, k in itertools.combinations(range(len(P)), 3):
        best = min(best, _triangle(P[i], P[j], P[k]))
    return best


def test_min_norm_point_equals_brute_force_in_the_plane():
    rng = np.random.default_rng(0)
    for _ in range(150):
        n = int(rng.integers(1, 8))
        P = rng.standard_normal((n, 2)) + rng.standard_normal(2) * rng.uniform(0, 3)
        assert abs(np.linalg.norm(min_norm_point(P)) - brute_force_norm(P)) < 1e-9


def test_min_norm_point_is_optimal_in_higher_dimensions():
    rng = np.random.default_rng(1)
    for _ in range(10):
        P = rng.standard_normal((150, 16)) + 2 * rng.standard_normal(16)
        x = min_norm_point(P)
        # Optimality: no point of the set lies beyond the plane through x normal to x.
        assert (P @ x - x @ x).min() > -1e-9 * (P * P).sum(1).max()


def test_separation_of_known_sets():
    square = np.array([[0, 0], [1, 0], [0, 1], [1, 1]], dtype=float)
    assert hull_distance(square, square + [3, 0]) == pytest.approx(2.0)
    assert hull_distance(square, square + [0.5, 0.5]) == pytest.approx(0.0, abs=1e-12)
    # XOR: each class's hull crosses the other's, so no line separates them.
    xor = separation(square[[0, 3]], square[[1, 2]])
    assert not xor["separable"] and xor["gap"] < 1e-9
    assert separation(square, square + [3, 0])["separable"]


def test_ladder_measures_order_along_the_main_axis():
    noise = 0.01 * np.random.default_rng(0).standard_normal((8, 2))
    line = np.outer(np.arange(8), [1.0, 2.0]) + noise
    lad = ladder(line)
    assert lad["monotone"] and lad["rho"] == pytest.approx(1.0) and lad["axis_share"] > 0.99
    swapped = line[[0, 1, 2, 3, 5, 4, 6, 7]]  # one step backwards: 3 -> 5 -> 4 -> 6
    lad = ladder(swapped)
    assert not lad["monotone"] and lad["steps_in_order"] == 6 and lad["rho"] < 1


def test_recall_sources_by_loop():
    rng = np.random.default_rng(2)
    inputs = rng.integers(0, 12, (300, 8))
    index = rng.integers(0, 8, 300)
    even = np.array([i % 2 == 0 for i in range(11)] + [False])
    found = recall_sources(inputs, index, even)
    for w, i, s in zip(inputs, index, found):
        expected = max([j for j in range(i) if even[w[j]]], default=-1)
        assert s == expected


@pytest.fixture(scope="module")
def paper(paper_run):
    run = load_run(paper_run)
    data = TaskData.build(run.task, run.cfg.n_ctx, run.config.get("data_seed", 0))
    return run, run.model(), data


def test_the_five_steps_on_the_trained_paper_model(paper, paper_run):
    run, model, data = paper
    rows = run_checks(model, run.task, data)
    steps = [r["step"] for r in rows]
    for step in ("1 encode", "2 detect", "3 retrieve", "4 produce", "5 nudge"):
        assert step in steps
    by_measure = {r["measure"]: r["value"] for r in rows}
    retrieve = next(v for m, v in by_measure.items() if "most recent even" in m)
    landed = by_measure["z lands in the target's zone"]
    assert retrieve >= 0.99 and landed >= 0.99
    # Nudge is the rule metric seen geometrically: it must match the rule error exactly.
    assert landed == pytest.approx(1 - evaluate_run(paper_run)["rule_error"], abs=1e-12)
    assert by_measure["... without attention (z = e)"] < 0.5


def test_retrieval_and_recency_by_loop(paper):
    run, model, data = paper
    inputs, index = data.rule_inputs[:300], data.rule_index[:300]
    even = np.array([i % 2 == 0 for i in range(11)] + [False])
    found = retrieval(model, inputs, index, even)[(0, 0)]
    hits, wins, pairs = [], 0, 0
    for w, i in zip(inputs, index):
        _, cache = model.run_with_cache(w)
        row = cache["blocks.0.attn.hook_attn_scores"][0, 0, i]
        evens = [j for j in range(i) if even[w[j]]]
        hits.append(int(np.argmax(cache["blocks.0.attn.hook_pattern"][0, 0, i])) == evens[-1])
        for a, b in itertools.combinations(evens, 2):
            wins += row[b] > row[a]
            pairs += 1
    assert found == pytest.approx(np.mean(hits))
    assert recency(model, inputs, index, even) == pytest.approx(wins / pairs)


def test_production_and_nudge_by_hand(paper):
    run, model, data = paper
    inputs, index, targets = data.rule_inputs[:50], data.rule_index[:50], data.rule_targets[:50]
    even = np.array([i % 2 == 0 for i in range(11)] + [False])
    cos = production(model, inputs, index, even)
    t = model.tensors
    for w, i, c in zip(inputs, index, cos):
        source = [j for j in range(i) if even[w[j]]][-1]
        _, cache = model.run_with_cache(w)
        out = cache["blocks.0.hook_attn_out"][0, i]  # no W_O: the head's z is the output
        v = (t["embed.W_E"][w[source]] + t["pos_embed.W_pos"][source]) @ t["blocks.0.attn.W_V"][0]
        assert c == pytest.approx(out @ v / np.linalg.norm(out) / np.linalg.norm(v), abs=1e-12)
    nd = nudge(model, inputs, index, targets)
    # Without attention, z = e: the output network applied to the embeddings alone.
    e = t["embed.W_E"][inputs[np.arange(50), index]] + t["pos_embed.W_pos"][index]
    h = (
        e
        + np.maximum(e @ t["blocks.0.mlp.W_in"] + t["blocks.0.mlp.b_in"], 0)
        @ t["blocks.0.mlp.W_out"]
        + t["blocks.0.mlp.b_out"]
    )
    logits = h @ t["unembed.W_U"] + t["unembed.b_U"]
    assert nd["without_attention"] == pytest.approx(np.mean(logits.argmax(-1) == targets))


def test_encode_and_detect_measures_on_the_paper_model(paper):
    run, model, _ = paper
    vocab = run.task.vocab
    W_E = model.tensors["embed.W_E"]
    classes = {
        "even": W_E[[vocab.index(str(i)) for i in range(0, 11, 2)]],
        "odd": W_E[[vocab.index(str(i)) for i in range(1, 11, 2)]],
        "+": W_E[[vocab.index("+")]],
    }
    pairs = class_separation(classes)
    assert list(pairs) == ["even / odd", "even / +", "odd / +"]
    for pair in pairs.values():
        assert pair["separable"] == (pair["gap"] > 1e-9)
    lad = position_ladder(model)
    assert 0 <= lad["rho"] <= 1 and 0 <= lad["steps_in_order"] <= 7
    qs = query_separation(model, vocab.index("+"))
    assert qs["separable"]  # the trained model's `+` queries sit apart from the digits'


def test_tasks_declare_their_checks(paper):
    run, model, data = paper
    recall = get_task("plus-last-even").recall
    assert (recall.marker, recall.names) == ("+", ("even", "odd", "+"))
    assert run_checks(model, get_task("plus-last-even"), data)[0]["step"] == "1 encode"

    class Declared:
        name = "declared-task"

        @staticmethod
        def checks(ctx):
            return [
                {
                    "step": "1 encode",
                    "measure": "vocabulary",
                    "value": ctx.model.cfg.d_vocab,
                    "shown": str(ctx.model.cfg.d_vocab),
                }
            ]

    class Unknown:
        name = "no-checks"

    assert run_checks(model, Declared(), data)[0]["value"] == 12
    assert run_checks(model, Unknown(), data) is None
    assert checks_for(get_task("add-mod-5")) is None
