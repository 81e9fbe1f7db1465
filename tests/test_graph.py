"""Attribution graphs held to exactness as circuit-tracer's own tests hold them
(tests/test_attributions_gemma.py there): every edge is the change in its target when its source
is ablated in the replacement model with everything else held; each node's input is the sum of
its incoming edges plus its bias term; the replacement model with error nodes is the model.
Float64, 1e-9, on the paper's model and a 2-layer model (trained, with trained transcoders),
and on random models of every architecture flatformer has."""

import numpy as np
import pytest

from conftest import CONFIGS, random_model
from flatformer.dictionary.activations import transcoder_hooks
from flatformer.errors import FlatformerError
from flatformer.graph import Transcoder, attribute, load_transcoders, save_transcoders
from flatformer.graph import train_transcoders
from flatformer.graph.prune import influence, normalise, prune, threshold_of
from flatformer.store.runs import load_run

TOL = 1e-9


def random_transcoders(model, width=12, seed=0):
    rng = np.random.default_rng(seed)
    d, out = model.cfg.d_model, []
    for layer in [] if model.cfg.attn_only else range(model.cfg.n_layers):
        hook_in, hook_out = transcoder_hooks(model, f"blocks.{layer}.hook_mlp_out")
        out.append(
            Transcoder(
                layer,
                rng.standard_normal((d, width)),
                0.3 * rng.standard_normal(width),
                rng.standard_normal((width, d)),
                rng.standard_normal(d),
                hook_in,
                hook_out,
            )
        )
    return out


def targets(graph):
    n = len(graph.adjacency)
    return np.r_[np.arange(graph.n_features), np.arange(n - graph.n_logits, n)]


def check_exact(model, transcoders, tokens):
    """The three checks on one prompt."""
    graph = attribute(model, transcoders, tokens)
    rep = graph.extras["replacement"]
    n_s, n_f = rep.n_sources, rep.n_features
    # The replacement model with every node on is the model.
    logits, cache = rep.run(np.ones(n_s))
    real_logits, real = model.run_with_cache(tokens)
    np.testing.assert_allclose(logits, real_logits, rtol=0, atol=TOL)
    last = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
    np.testing.assert_allclose(cache[last], real[last], rtol=0, atol=TOL)
    # Each node's input: the model's (pre-activation; logit minus mean logit) ...
    t = targets(graph)
    for j, (layer, pos, idx) in enumerate(graph.features):
        tc = transcoders[[tc.layer for tc in transcoders].index(layer)]
        assert abs(graph.inputs[j] - tc.pre(real[tc.hook_in][0, pos])[idx]) < TOL
        assert abs(graph.activations[j] - max(graph.inputs[j], 0.0)) < TOL
    last_logits = real_logits[0, -1]
    expect = last_logits[graph.logit_tokens] - last_logits.mean()
    np.testing.assert_allclose(graph.inputs[n_s:], expect, rtol=0, atol=TOL)
    # ... is the sum of its incoming edges plus its bias (completeness).
    np.testing.assert_allclose(
        graph.adjacency[t].sum(1) + graph.bias[t], graph.inputs[t], rtol=0, atol=TOL
    )
    # Every edge is its source's ablation, everything else held: one sequence per source.
    logits, cache = rep.run(np.ones((n_s, n_s)) - np.eye(n_s))
    ablated = np.hstack([rep.feature_inputs(cache), rep.logit_inputs(logits, graph.logit_tokens)])
    change = graph.inputs[t][None] - ablated  # (source, target)
    np.testing.assert_allclose(graph.adjacency[t][:, :n_s], change.T, rtol=0, atol=TOL)
    # Nothing flows backwards: no edge into a feature from its own block or a later one, or
    # from a later position.
    for j, (layer, pos, _) in enumerate(graph.features):
        for s in np.flatnonzero(graph.adjacency[j]):
            kind = graph.kind(s)
            if kind in ("feature", "error"):
                src_layer = (
                    graph.features[s, 0]
                    if kind == "feature"
                    else graph.error_layers[(s - n_f) // graph.n_pos]
                )
                assert src_layer < layer
    return graph


@pytest.mark.parametrize("name", list(CONFIGS))
def test_random_models_of_every_architecture_are_exact(name):
    model = random_model(CONFIGS[name])
    tokens = np.random.default_rng(1).integers(0, model.cfg.d_vocab, min(model.cfg.n_ctx, 7))
    graph = check_exact(model, random_transcoders(model), tokens)
    assert graph.n_logits >= 1 and graph.logit_probs[0] == graph.logit_probs.max()
    if not model.cfg.attn_only:
        assert graph.n_features > 0


def test_paper_model_edges_equal_a_loop_written_from_the_paper(paper_transcoders):
    """The paper's model (one head, no W_O, no LayerNorm): a feature's input from the token and
    position embeddings is e_k . W_enc[:, i] at its own position plus A[q, k] (e_k W_V) . W_enc
    from every key k; a feature's edge to a logit is a W_dec[i] . (u_t - mean u) at the last
    position, and 0 elsewhere. Written with explicit loops."""
    run, transcoders = paper_transcoders
    model, w = run.model(), run.model().tensors
    tokens = np.asarray(run.data().val_inputs)[3]
    graph = check_exact(model, transcoders, tokens)
    tc, T = transcoders[0], len(tokens)
    _, cache = model.run_with_cache(tokens)
    A = cache["blocks.0.attn.hook_pattern"][0, 0]
    n_f = graph.n_features
    tok0, pos0 = n_f + graph.n_errors, n_f + graph.n_errors + T
    for j, (_, q, i) in enumerate(graph.features):
        for k in range(T):
            for col, e in (
                (tok0 + k, w["embed.W_E"][tokens[k]]),
                (pos0 + k, w["pos_embed.W_pos"][k]),
            ):
                expect = A[q, k] * (e @ w["blocks.0.attn.W_V"][0]) @ tc.W_enc[:, i]
                if k == q:
                    expect += e @ tc.W_enc[:, i]
                assert abs(graph.adjacency[j, col] - expect) < TOL
    U = w["unembed.W_U"]
    n = len(graph.adjacency)
    for r, t in enumerate(graph.logit_tokens):
        u = U[:, t] - U.mean(1)
        for j, (_, q, i) in enumerate(graph.features):
            expect = graph.activations[j] * tc.W_dec[i] @ u if q == T - 1 else 0.0
            assert abs(graph.adjacency[n - graph.n_logits + r, j] - expect) < TOL
    assert graph.n_features > 0


def test_two_layer_model_is_exact(two_layer_transcoders):
    run, transcoders = two_layer_transcoders
    for row in np.asarray(run.data().val_inputs)[:3]:
        graph = check_exact(run.model(), transcoders, row)
    # layer-0 features feed layer-1 features somewhere
    layer1 = np.flatnonzero(graph.features[:, 0] == 1)
    layer0 = np.flatnonzero(graph.features[:, 0] == 0)
    assert len(layer1) and len(layer0)


@pytest.fixture(scope="module")
def paper_transcoders(paper_run):
    run = load_run(paper_run)
    return run, train_transcoders(run, steps=300)[0]


@pytest.fixture(scope="module")
def two_layer_transcoders(two_layer_run):
    run = load_run(two_layer_run)
    return run, train_transcoders(run, steps=300)[0]


def test_trained_transcoders_reconstruct_and_round_trip(paper_run, tmp_path):
    run = load_run(paper_run)
    transcoders, metrics = train_transcoders(run, steps=300)
    assert metrics[0]["fvu"] < 0.3 and metrics[0]["l0"] > 0
    save_transcoders(transcoders, tmp_path / "tc")
    back = load_transcoders(tmp_path / "tc", run.model())
    for a, b in zip(transcoders, back):
        for n, v in a.weights().items():
            np.testing.assert_array_equal(v, b.weights()[n])
    with pytest.raises(FlatformerError, match="no transcoder for block 0"):
        load_transcoders(tmp_path, run.model())


def test_transcoders_read_together_equal_one_block_at_a_time(two_layer_run, monkeypatch):
    """Every MLP's activations come from one pass over the windows where they fit READ_BYTES:
    the same transcoders and metrics as a pass per block."""
    run = load_run(two_layer_run)
    together, metrics = train_transcoders(run, steps=20)
    monkeypatch.setattr("flatformer.graph.transcoders.READ_BYTES", 1)
    alone, alone_metrics = train_transcoders(run, steps=20)
    assert len(together) == 2 and metrics == alone_metrics
    for a, b in zip(together, alone):
        for n, v in a.weights().items():
            np.testing.assert_array_equal(v, b.weights()[n])


# ---- pruning ------------------------------------------------------------------------------


def test_influence_is_the_matrix_series():
    rng = np.random.default_rng(0)
    A = np.tril(rng.random((6, 6)), -1)  # acyclic
    w = rng.random(6)
    series = w @ (np.linalg.inv(np.eye(6) - A) - np.eye(6))
    np.testing.assert_allclose(influence(A, w), series, rtol=1e-12)
    np.testing.assert_allclose(
        normalise(np.array([[1.0, -3.0], [0.0, 0.0]])), [[0.25, 0.75], [0.0, 0.0]]
    )


def test_threshold_keeps_the_smallest_top_set_reaching_the_fraction():
    scores = np.array([5.0, 3.0, 1.0, 1.0])  # cumulative 0.5, 0.8, 0.9, 1.0
    assert threshold_of(scores, 0.8) == 3.0
    assert threshold_of(scores, 0.81) == 1.0
    assert threshold_of(scores, 0.5) == 5.0


def test_pruning_drops_a_feature_that_does_not_reach_the_logits(two_layer_transcoders):
    run, transcoders = two_layer_transcoders
    graph = attribute(run.model(), transcoders, np.asarray(run.data().val_inputs)[0])
    kept = prune(graph, 1.0, 1.0)
    n = len(graph.adjacency)
    inner = n - graph.n_inputs - graph.n_logits
    # at thresholds 1 every node with influence is kept, every edge with weight
    has_influence = kept.influence[:inner] > 0
    assert (kept.node_mask[:inner] <= has_influence).all()
    assert kept.node_mask[inner:].all()
    default = prune(graph)
    assert default.node_mask.sum() <= kept.node_mask.sum()
    assert default.edge_mask.sum() < (graph.adjacency != 0).sum()
    assert (graph.adjacency[default.edge_mask] != 0).all()
    # kept edges join kept nodes only
    t, s = np.nonzero(default.edge_mask)
    assert default.node_mask[t].all() and default.node_mask[s].all()
    with pytest.raises(FlatformerError, match="between 0 and 1"):
        prune(graph, 1.5)


# ---- QK attributions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["paper-2d", "2-layer-ln-bias", "attn-only-ln-final", "imported-features"]
)
def test_qk_terms_sum_to_every_score_of_every_head(name):
    from flatformer.graph.files import qk_hooks
    from flatformer.graph.qk import qk_terms

    model = random_model(CONFIGS[name])
    tokens = np.random.default_rng(2).integers(0, model.cfg.d_vocab, min(model.cfg.n_ctx, 6))
    graph = attribute(model, random_transcoders(model), tokens, keep=qk_hooks(model.cfg))
    _, real = model.run_with_cache(tokens)
    T = len(tokens)
    for L in range(model.cfg.n_layers):
        scores = real[f"blocks.{L}.attn.hook_attn_scores"][0]
        for h in range(model.cfg.n_heads):
            for q in range(T):
                for k in range(q + 1):
                    terms = qk_terms(graph, L, h, q, k)
                    assert abs(terms.sum() - scores[h, q, k]) < TOL
            # the key side of a query's score: no source at a later position contributes
            terms = qk_terms(graph, L, h, 1, 0)
            later = [
                s
                for s in range(graph.extras["replacement"].n_sources)
                if graph.kind(s) in ("token", "position")
                and (s - graph.n_features - graph.n_errors) % T > 1
            ]
            assert not terms[later].any() and not terms[:, later].any()


def test_qk_table_lists_the_largest_terms_and_the_rest_sums_to_the_score(paper_transcoders):
    from flatformer.graph.export import node_records
    from flatformer.graph.files import qk_hooks
    from flatformer.graph.qk import qk_table

    run, transcoders = paper_transcoders
    model = run.model()
    tokens = np.asarray(run.data().val_inputs)[5]
    graph = attribute(model, transcoders, tokens, keep=qk_hooks(model.cfg))
    pruned = prune(graph)
    records = node_records(graph, pruned, run.vocab)
    table = qk_table(graph, pruned, [r["node_id"] for r in records], top=3)
    _, real = model.run_with_cache(tokens)
    assert table
    ids = {r["node_id"] for r in records} | {"bias"}
    for row in table:
        total = sum(t["value"] for t in row["terms"]) + row["rest"]
        assert abs(total - row["score"]) < TOL
        assert (
            row["score"]
            == real["blocks.0.attn.hook_attn_scores"][0, 0, row["query_pos"], row["key_pos"]]
        )
        assert len(row["terms"]) <= 3 and {t["query"] for t in row["terms"]} <= ids
        values = [abs(t["value"]) for t in row["terms"]]
        assert values == sorted(values, reverse=True)


# ---- against the truth ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["2-layer", "2-layer-ln-bias", "attn-only-ln-final"])
def test_paths_split_by_heads_sum_to_the_graph(name):
    from flatformer.graph.truth import head_paths

    model = random_model(CONFIGS[name])
    tokens = np.random.default_rng(3).integers(0, model.cfg.d_vocab, 6)
    transcoders = random_transcoders(model)
    full = attribute(model, transcoders, tokens).adjacency
    D, single, pairs = head_paths(model, transcoders, tokens)
    total = D + sum(single.values()) + sum(pairs.values())
    np.testing.assert_allclose(total, full, rtol=0, atol=TOL)
    # the residual stream alone joins a position only to itself
    graph = attribute(model, transcoders, tokens)
    assert len(pairs) == model.cfg.n_heads**2
    tok0 = graph.n_features + graph.n_errors
    n = len(D)
    assert not D[n - graph.n_logits :, tok0 : tok0 + len(tokens) - 1].any()


def test_scores_against_the_paper_models_circuit(paper_transcoders):
    from flatformer.tasks.windows import TaskData
    from flatformer.edges.methods import build_problem, find_circuits, prompts_for
    from flatformer.graph.truth import edge_scores, score

    run, transcoders = paper_transcoders
    model = run.model()
    data = TaskData.build(run.task, run.cfg.n_ctx)
    truth = find_circuits(
        build_problem(model, run.task, data, "mean", n_prompts=50), methods=("exact",)
    )
    edges = [(e["src"], e["dst"]) for e in truth["edges"]]
    tokens, index, _ = prompts_for(run.task, data, 4)
    plain, qk = zip(
        *(edge_scores(model, transcoders, t[: i + 1], edges) for t, i in zip(tokens, index))
    )
    q_or_k = [i for i, (_, dst) in enumerate(edges) if dst.endswith((".q", ".k"))]
    assert not np.array(plain)[:, q_or_k].any()  # frozen attention: no q or k edge
    assert np.array(qk)[:, q_or_k].any()  # the QK attributions give them one
    s = score(truth, list(qk))
    assert 0 <= s["auc"] <= 1 and s["recall"] > 0.5
    assert set(s["missed"]) | set(s["kept_edges"]) >= {
        f"{a}>{b}" for a, b in truth["circuit"]["edges"]
    }


# ---- supernodes ---------------------------------------------------------------------------


def test_supernodes_join_features_whose_decoders_agree():
    from flatformer.graph.supernodes import decoder_groups, supernode_params

    model = random_model(CONFIGS["2-layer"])
    transcoders = random_transcoders(model, width=6)
    W = transcoders[0].W_dec
    W[1] = 3.0 * W[0]  # same direction, other length: one group
    W[2] = W[0] + 1e-3 * W[3]  # nearly the same: joined to it, and so to 1
    W[4] = -W[0]  # opposite: not joined
    for tc in transcoders:
        tc.b_enc[:] = 5.0  # every feature active at every position
        tc.W_enc[:] *= 1e-3
    tokens = np.arange(3)
    graph = attribute(model, transcoders, tokens)
    groups = decoder_groups(graph, np.ones(len(graph.adjacency), bool), transcoders)
    by_features = sorted(
        sorted({(int(graph.features[i, 0]), int(graph.features[i, 2])) for i in g}) for g in groups
    )
    assert [(0, 0), (0, 1), (0, 2)] in by_features
    assert not any((0, 4) in g and (0, 0) in g for g in by_features)
    # each feature's own occurrences at the three positions are grouped with it
    for g in groups:
        assert len(g) >= 3
    ids = [f"n{i}" for i in range(len(graph.adjacency))]
    params = supernode_params(graph, groups, ids)
    assert all(p[0].startswith("block ") and len(p) == len(g) + 1 for p, g in zip(params, groups))


def test_pair_agreement_counts_pairs():
    from flatformer.graph.supernodes import pair_agreement

    roles = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c"}
    perfect = pair_agreement([[0, 1], [2, 3]], roles)
    assert perfect["precision"] == 1.0 and perfect["recall"] == 1.0
    merged = pair_agreement([[0, 1, 2, 3]], roles)  # 6 pairs grouped, 2 share a role
    assert merged["precision"] == 2 / 6 and merged["recall"] == 1.0
    split = pair_agreement([], roles)
    assert np.isnan(split["precision"]) and split["recall"] == 0.0


def test_an_mlp_without_a_transcoder_is_refused():
    model = random_model(CONFIGS["2-layer"])
    with pytest.raises(FlatformerError, match="block 1's MLP has no transcoder"):
        attribute(model, random_transcoders(model)[:1], [1, 2, 3])


def test_layernorm_with_its_own_scale_given_is_layernorm_and_linear():
    from flatformer.engine.components import layer_norm, layer_norm_frozen

    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((2, 5, 7))
    w, b = rng.standard_normal(7), rng.standard_normal(7)
    out, _, scale = layer_norm(x, w, b)
    np.testing.assert_allclose(layer_norm_frozen(x, w, b, scale), out, rtol=0, atol=1e-12)
    # frozen, it is affine: f(x + y) - b = (f(x) - b) + (f(y) - b)
    lhs = layer_norm_frozen(x + y, w, b, scale) - b
    rhs = layer_norm_frozen(x, w, b, scale) + layer_norm_frozen(y, w, b, scale) - 2 * b
    np.testing.assert_allclose(lhs, rhs, rtol=0, atol=1e-12)


def test_the_graph_of_a_compiled_histogram_finds_its_known_circuit():
    """hist's circuit, read off its weights: one head counting each token's equals and an MLP
    reading the count. With its QK attributions the graph keeps exactly those edges."""
    import itertools

    from flatformer.edges.graph import EdgeGraph
    from flatformer.graph.transcoders import fit_transcoders
    from flatformer.graph.truth import edge_scores, score
    from flatformer.model.transformer import Transformer
    from flatformer.rasp import library as lib
    from flatformer.rasp.circuit import known_edges
    from flatformer.rasp.compile import compile_rasp_to_model

    compiled = compile_rasp_to_model(lib.make_hist(), [1, 2, 3], 4)
    model = Transformer(compiled.cfg, compiled.tensors)
    inputs = np.array([compiled.encode(xs) for xs in itertools.product([1, 2, 3], repeat=4)])
    transcoders, fvu = fit_transcoders(model, inputs, [0], steps=300)
    known = {tuple(e) for e in known_edges(model)}
    edges = EdgeGraph(model).edges
    truth = {"edges": [{"src": s, "dst": d, "in_circuit": (s, d) in known} for s, d in edges]}
    with_qk = [edge_scores(model, transcoders, inputs[i], edges)[1] for i in (0, 40, 80)]
    result = score(truth, with_qk)
    assert (result["auc"], result["precision"], result["recall"]) == (1.0, 1.0, 1.0)
    assert result["circuit"] == len(known) == 6


def test_a_graph_larger_than_the_machine_is_refused_before_its_matrices(monkeypatch):
    """The sources are known once the replacement model is built: a graph whose matrices would
    pass the machine's memory is refused there, in one line naming a prompt that fits."""
    from flatformer.graph.attribution import graph_memory

    model = random_model(CONFIGS[list(CONFIGS)[0]])
    tokens = np.arange(min(model.cfg.n_ctx, 7)) % model.cfg.d_vocab
    graph = attribute(model, random_transcoders(model), tokens)
    rep = graph.extras["replacement"]
    needed = graph_memory(rep.n_sources, graph.n_features, graph.n_logits)
    assert needed >= 8 * 5 * len(graph.adjacency) ** 2
    monkeypatch.setattr("flatformer.store.resources.available_memory", lambda: needed // 10)
    with pytest.raises(FlatformerError) as err:
        attribute(model, random_transcoders(model), tokens)
    message = str(err.value)
    assert "\n" not in message and "the attribution graph of 7 tokens" in message
    assert "a prompt of about 2 tokens would fit" in message
