"""The edge graph: edge-ablated forward and backward against hooks on the torch and
TransformerLens bridges, EAP against the analytic linearisation, the measures against known
values, and the circuits of real models."""

import numpy as np
import pytest
import torch

from conftest import CONFIGS, random_model
from edge_hooks import hooked_edge_logits, tl_runner
from flatformer.model.bridge import to_torch, to_transformer_lens
from flatformer.tasks.windows import TaskData
from flatformer.edges.graph import EdgeGraph
from flatformer.errors import FlatformerError
from flatformer.edges.methods import (
    build_problem,
    eap,
    eap_ig,
    exact_effects,
    find_circuits,
    path_patch,
    rank,
    roc_auc,
    spearman,
)
from flatformer.edges.report import known_circuit_scores
from flatformer.store.runs import load_run
from flatformer.model.transformer import Transformer


def random_case(cfg, seed=0, batch=4):
    model = random_model(cfg, seed)
    graph = EdgeGraph(model)
    rng = np.random.default_rng(seed + 2)
    tokens = rng.integers(0, cfg.d_vocab, (batch, cfg.n_ctx))
    refs = {s: rng.standard_normal((batch, cfg.n_ctx, cfg.d_model)) for s in graph.senders}
    return model, graph, tokens, refs, rng


def test_graph_names_and_counts():
    graph = EdgeGraph(random_model(CONFIGS["paper-2d"]))
    assert graph.nodes == ["tok", "pos", "a0.0", "m0", "logits"]
    assert graph.receivers == ["a0.0.q", "a0.0.k", "a0.0.v", "m0", "logits"]
    assert graph.n_edges == 2 * 3 + 3 + 4
    two = EdgeGraph(random_model(CONFIGS["2-layer-ln-bias"]))
    # layer 0: 2 heads x 3 receivers x 2 senders; m0: 4; layer 1: 2 x 3 x 5; m1: 7; logits: 8
    assert two.n_edges == 12 + 4 + 30 + 7 + 8
    assert ("a0.1", "a1.0.k") in two.edges and ("a1.0", "a1.1.q") not in two.edges


def test_unablated_graph_is_the_engine(cfg):
    model, graph, tokens, refs, _ = random_case(cfg)
    logits, _ = graph.forward(tokens, refs, np.ones((1, graph.n_edges)))
    np.testing.assert_allclose(logits[0], model(tokens), atol=1e-12, rtol=0)


@pytest.mark.parametrize("every", [False, True])
def test_reading_the_logits_at_positions_is_the_full_run_there(cfg, every):
    """One position per prompt, or every position of each (a compiled program's outputs): the
    last layer attends once per readout, each query over its own prompt's keys."""
    _, graph, tokens, refs, rng = random_case(cfg)
    B, T = tokens.shape
    if every:
        rows, index = np.repeat(np.arange(B), T), np.tile(np.arange(T), B)
    else:
        rows, index = np.arange(B), rng.integers(0, cfg.n_ctx, B)
    masks = rng.uniform(0, 1, (3, graph.n_edges))
    full, full_trace = graph.forward(tokens, refs, masks)
    there, trace = graph.forward(tokens, refs, masks, (rows, index))
    np.testing.assert_allclose(there, full[:, rows, index], atol=1e-12, rtol=0)
    weights = rng.standard_normal(there.shape)
    scattered = np.zeros(full.shape)
    scattered[:, rows, index] = weights
    np.testing.assert_allclose(
        graph.backward(trace, weights)[1],
        graph.backward(full_trace, scattered)[1],
        atol=1e-10,
        rtol=0,
    )


@pytest.mark.parametrize("metric", ["l2", "logprob"])
def test_every_position_metrics_have_their_gradient(metric):
    """d metric / d mask at a point between ablated and clean (central differences agree), with
    every position read; L2's gradient, like KL's, vanishes at the clean model."""
    cfg = CONFIGS["2-layer"].replace(causal=False)
    model, graph, tokens, _, rng = random_case(cfg, batch=3)
    refs = {s: rng.standard_normal((cfg.n_ctx, cfg.d_model)) for s in graph.senders}
    examples = (tokens, np.zeros(len(tokens), int), np.zeros(len(tokens), int), None, None)
    problem = build_problem(model, None, None, "zero", metric, examples=examples, positions="all")
    problem.refs = refs
    assert len(problem.rows) == len(tokens) * (cfg.n_ctx - 1)
    at = rng.uniform(0.2, 0.8, graph.n_edges)
    logits, trace = graph.forward(tokens, refs, at[None], problem.positions)
    _, dmask = graph.backward(trace, problem.value_grad(logits))
    eps = 1e-6
    plus = problem.evaluate(at + eps * np.eye(graph.n_edges))
    minus = problem.evaluate(at - eps * np.eye(graph.n_edges))
    np.testing.assert_allclose(dmask[0], (plus - minus) / (2 * eps), atol=1e-6)
    clean = problem.evaluate(np.ones(graph.n_edges))[0]
    if metric == "l2":
        assert abs(clean) < 1e-20 and np.abs(eap(problem)).max() < 1e-12


@pytest.mark.parametrize("bridge", ["torch", "transformer-lens"])
def test_edge_ablation_and_its_gradient_equal_hooks_on_the_bridge(cfg, bridge):
    torch.set_num_threads(1)
    model, graph, tokens, refs, rng = random_case(cfg)
    if bridge == "transformer-lens" and cfg.attn_coeff != 1.0:
        with pytest.raises(FlatformerError, match="TransformerLens has no attention rate"):
            to_transformer_lens(model)
        return
    run = to_torch(model) if bridge == "torch" else tl_runner(to_transformer_lens(model))
    weights = rng.standard_normal((*tokens.shape, cfg.vocab_out))
    for masks in (
        rng.integers(0, 2, graph.n_edges).astype(float),
        rng.uniform(0, 1, graph.n_edges),
    ):
        logits, trace = graph.forward(tokens, refs, masks[None])
        mask = torch.tensor(masks, requires_grad=True)
        hooked = hooked_edge_logits(run, graph, tokens, refs, mask)
        np.testing.assert_allclose(logits[0], hooked.detach().numpy(), atol=1e-9, rtol=0)
        (hooked * torch.tensor(weights)).sum().backward()
        _, dmask = graph.backward(trace, weights[None])
        np.testing.assert_allclose(dmask[0], mask.grad.numpy(), atol=1e-9, rtol=0)


@pytest.mark.parametrize("name", ["paper-2d", "2-layer-ln-bias"])
def test_a_model_attending_both_ways_has_an_exact_graph(name):
    """causal: false (compiled programs, InterpBench's models): the same checks as above."""
    cfg = CONFIGS[name].replace(causal=False)
    test_unablated_graph_is_the_engine(cfg)
    test_reading_the_logits_at_positions_is_the_full_run_there(cfg, True)
    test_edge_ablation_and_its_gradient_equal_hooks_on_the_bridge(cfg, "torch")
    model = random_model(cfg)
    tokens = np.random.default_rng(0).integers(0, cfg.d_vocab, (2, cfg.n_ctx))
    assert np.abs(model(tokens) - random_model(CONFIGS[name])(tokens)).max() > 1e-3


def test_methods_are_scored_against_a_known_circuit_by_hand():
    rows = [("tok", "m0", 0.9, 0.5), ("pos", "m0", -0.2, -0.8), ("m0", "logits", 0.5, 0.1)]
    report = {
        "edges": [{"src": s, "dst": d, "exact": x, "eap": e} for s, d, x, e in rows],
        "circuit": {"edges": [["tok", "m0"], ["m0", "logits"]], "edges_kept": 2},
        "methods": {},
    }
    scores = known_circuit_scores(report, [["tok", "m0"], ["pos", "m0"]])
    exact, eap_ = scores["methods"]["exact"], scores["methods"]["eap"]
    # |exact| ranks tok>m0 (0.9) above m0>logits (0.5) above pos>m0 (0.2): positives 1st and 3rd
    assert exact["auc"] == 0.5 and exact["precision"] == 0.5 and exact["recall"] == 0.5
    # |eap| ranks pos>m0 (0.8), tok>m0 (0.5), m0>logits (0.1): both positives first
    assert eap_["auc"] == 1.0 and eap_["precision"] == 1.0 and eap_["recall"] == 1.0
    with pytest.raises(FlatformerError, match="a0.0->logits is not in the model's graph"):
        known_circuit_scores(report, [["a0.0", "logits"]])


def test_eap_is_the_linearisation():
    """EAP is d metric / d mask at the clean model (central differences agree), and for the
    logit difference, which is linear in what the logits read, EAP of every edge into the
    logits is its exact effect."""
    cfg = CONFIGS["2-layer"]
    model, graph, tokens, _, rng = random_case(cfg, batch=6)
    from flatformer.edges.methods import Problem

    refs = {s: rng.standard_normal((cfg.n_ctx, cfg.d_model)) for s in graph.senders}
    index = rng.integers(0, cfg.n_ctx, len(tokens))
    target, other = rng.integers(0, cfg.d_vocab, (2, len(tokens)))
    for metric in ("logprob", "kl", "logit-diff"):
        problem = Problem(graph, tokens, index, target, tokens, other, refs, metric, "mean")
        estimate = eap(problem)
        eps, ones = 1e-6, np.ones(graph.n_edges)
        plus = problem.evaluate(ones - eps * np.eye(graph.n_edges))
        minus = problem.evaluate(ones + eps * np.eye(graph.n_edges))
        np.testing.assert_allclose(estimate, (plus - minus) / (2 * eps), atol=1e-6)
        if metric == "kl":
            assert np.abs(estimate).max() < 1e-12  # KL's gradient vanishes at the clean model
        if metric == "logit-diff":
            effects, _ = exact_effects(problem)
            into_logits = [e for e, (_, dst) in enumerate(graph.edges) if dst == "logits"]
            np.testing.assert_allclose(estimate[into_logits], effects[into_logits], atol=1e-10)
        # EAP-IG with one step is EAP; its estimates sum to the whole gap only in the limit.
        np.testing.assert_allclose(eap_ig(problem, 1), estimate, atol=1e-12)


def test_rank_auc_and_spearman_on_known_values():
    np.testing.assert_array_equal(rank([3, 1, 4, 1, 5]), [3, 1.5, 4, 1.5, 5])
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert roc_auc([1, 1, 1, 1], [0, 1, 0, 1]) == 0.5
    assert np.isnan(roc_auc([1, 2], [1, 1]))
    # scipy.stats.spearmanr gives 0.8207826816681233 and 0.19885368120992467
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(
        0.8207826816681233, abs=1e-12
    )
    assert spearman([3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]) == pytest.approx(
        0.19885368120992467, abs=1e-12
    )


@pytest.fixture(scope="module")
def paper(paper_run):
    run = load_run(paper_run)
    return run, TaskData.build(run.task, run.cfg.n_ctx)


def test_paper_circuit_is_faithful_minimal_and_the_papers_algorithm(paper):
    run, data = paper
    problem = build_problem(run.model(), run.task, data, "mean")
    report = find_circuits(problem)
    circuit = report["circuit"]
    assert circuit["faithfulness"] >= 0.95
    assert circuit["edges_kept"] < circuit["edges_total"] == 13
    assert circuit["minimal"] and min(circuit["drop_losses"]) > circuit["tolerance"]
    kept = {tuple(e) for e in circuit["edges"]}
    # the + query and the even keys into the head, its value path, the MLP, the unembedding
    assert {
        ("tok", "a0.0.q"),
        ("tok", "a0.0.k"),
        ("tok", "a0.0.v"),
        ("a0.0", "m0"),
        ("m0", "logits"),
    } <= kept
    methods = report["methods"]
    assert methods["acdc"]["faithfulness"] >= 0.95
    from flatformer.publish.report import circuit_html

    html = circuit_html(report)  # the reproduce report's section
    assert "a0.0 → m0" in html and f"{circuit['edges_kept']} of 13 edges" in html
    assert f"{methods['eap']['auc']:.3f}" in html
    assert methods["eap"]["auc"] > 0.5 and methods["eap_ig"]["auc"] > 0.5


def test_path_patching_one_edge_is_its_resample_effect(paper):
    run, data = paper
    problem = build_problem(run.model(), run.task, data, "resample")
    effects, _ = exact_effects(problem)
    graph = problem.graph
    for edge in [("tok", "a0.0.v"), ("a0.0", "m0"), ("tok", "a0.0.q")]:
        assert path_patch(problem, [edge]) == pytest.approx(
            effects[graph.edge_index(*edge)], abs=1e-9
        )
    # the even number reaches the output only through the head's value: the query path is inert
    assert abs(path_patch(problem, [("tok", "a0.0.q")])) < 1e-12
    through = path_patch(problem, [("tok", "a0.0.v"), ("a0.0", "m0"), ("m0", "logits")])
    assert through < -1.0


def test_a_head_without_values_has_no_edges_out(two_layer_run):
    run = load_run(two_layer_run)
    tensors = run.model().tensors
    tensors["blocks.0.attn.W_V"][0] = 0.0
    model = Transformer(run.cfg, tensors)
    data = TaskData.build(run.task, run.cfg.n_ctx)
    for ablation in ("mean", "zero", "resample"):
        problem = build_problem(model, run.task, data, ablation, n_prompts=100)
        report = find_circuits(problem, ig_steps=3)
        out_of_head = [e for e in report["edges"] if e["src"] == "a0.0"]
        assert out_of_head
        for e in out_of_head:
            assert e["exact"] == 0.0 and e["eap"] == 0.0 and e["eap_ig"] == 0.0
            assert not e["in_circuit"]
        assert all(src != "a0.0" for src, _ in report["methods"]["acdc"]["edges"])


def test_plus_last_even_corrupts_the_retrieved_even(paper):
    run, data = paper
    keep = data.rule_targets >= 0
    inputs, index, target = data.rule_inputs[keep], data.rule_index[keep], data.rule_targets[keep]
    corrupt, new = run.task.corrupt(inputs, index, np.random.default_rng(0))
    assert (new != target).all() and (new % 2 == 0).all()
    changed = corrupt != inputs
    assert (changed.sum(1) == 1).all()
    rows = np.arange(len(inputs))
    from flatformer.analysis.algorithm import recall_sources

    wanted = np.array([i % 2 == 0 for i in range(11)] + [False])
    source = recall_sources(inputs, index, wanted)
    assert (corrupt[rows, source] == new).all()
    assert (recall_sources(corrupt, index, wanted) == source).all()


def test_circuits_command_json_and_refusals(paper_run):
    from clitools import assert_one_line_error, cli
    import json

    result = cli("circuits", paper_run, "--json", "--prompts", "60")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["edges"][0]) >= {"src", "dst", "exact", "eap", "eap_ig"}
    assert set(report["methods"]["eap"]) >= {"auc", "spearman", "seconds"}
    assert set(report["methods"]["eap_ig"]) >= {"auc", "spearman", "seconds"}
    assert set(report["methods"]["acdc"]) >= {"auc", "edges_kept", "faithfulness", "seconds"}
    circuit = report["circuit"]
    assert set(circuit) >= {"edges", "edges_kept", "edges_total", "faithfulness"}
    assert circuit["edges_kept"] == len(circuit["edges"]) < circuit["edges_total"]
    text = cli("circuits", paper_run, "--prompts", "60", "--methods", "eap")
    assert text.returncode == 0 and "m0 -> logits" in text.stdout
    assert max(len(line) for line in text.stdout.splitlines()) <= 80
    assert_one_line_error(cli("circuits", paper_run, "--ablation", "half"), "--ablation")
    assert_one_line_error(cli("circuits", paper_run, "--methods", "eap,magic"), "magic")
    assert_one_line_error(cli("circuits", paper_run, "--path", "tok>m0,a0.0>logits"), "breaks")
    patched = cli(
        "circuits",
        paper_run,
        "--json",
        "--prompts",
        "60",
        "--methods",
        "eap",
        "--ablation",
        "resample",
        "--path",
        "tok>a0.0.v",
    )
    report = json.loads(patched.stdout)
    exact = [e["exact"] for e in report["edges"] if (e["src"], e["dst"]) == ("tok", "a0.0.v")]
    assert report["path_patching"]["effect"] == pytest.approx(exact[0], abs=1e-9)


def test_resample_needs_a_task_that_corrupts(paper):
    from flatformer.errors import FlatformerError
    from flatformer.tasks import get_task

    run, _ = paper

    class NoCorruption(type(get_task("last-odd"))):
        def corrupt(self, inputs, index, rng):
            return None

    task = NoCorruption()
    data = TaskData.build(task, run.cfg.n_ctx)
    with pytest.raises(FlatformerError, match="declares no corruption"):
        build_problem(run.model(), task, data, "resample")
    assert build_problem(run.model(), task, data, "mean", n_prompts=20).metric == "logprob"


def test_rounding_noise_ties_at_zero():
    from flatformer.edges.methods import rounding_to_zero

    np.testing.assert_array_equal(rounding_to_zero([-3.0, 1e-17, -2e-16, 0.5]), [-3, 0, 0, 0.5])
    np.testing.assert_array_equal(rounding_to_zero([0.0, 0.0]), [0, 0])
