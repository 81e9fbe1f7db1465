"""The edge graph of the newer architectures (RMSNorm, rotary and shortformer positions, gated
and SoLU MLPs, parallel attention and MLP, grouped-query attention, local layers): unablated it
is the reference engine (float64, 1e-9); ablated, it and its gradient are edge ablation done by
hooks on the torch bridge (tests/edge_hooks.py), as for the classic block in test_edges.py."""

import numpy as np
import pytest
import torch

from edge_hooks import hooked_edge_logits
from flatformer.config import ModelConfig
from flatformer.edges.graph import EdgeGraph
from flatformer.engine.model import init_params
from flatformer.model.bridge import to_torch
from flatformer.model.transformer import Transformer
from test_architectures import ARCHITECTURES, BASE


@pytest.fixture(params=list(ARCHITECTURES))
def arch(request):
    return ModelConfig(**{**BASE, **ARCHITECTURES[request.param]})


def random_case(cfg, seed=0, batch=3):
    """A model with random weights (gains and biases moved off 1 and 0), tokens and every
    sender's ablated value."""
    rng = np.random.default_rng(seed)
    params = init_params(cfg, [np.random.default_rng(seed)])
    for name, view in params.views.items():
        if "ln" in name or "b_" in name:
            view += 0.3 * rng.standard_normal(view.shape)
    model = Transformer(cfg, params.seed(0))
    graph = EdgeGraph(model)
    tokens = rng.integers(0, cfg.d_vocab, (batch, cfg.n_ctx))
    refs = {s: rng.standard_normal((batch, cfg.n_ctx, cfg.d_model)) for s in graph.senders}
    return model, graph, tokens, refs, rng


def close(got, want, tol=1e-9):
    want = np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, np.abs(want).max()))


def test_unablated_graph_is_the_engine(arch):
    model, graph, tokens, refs, rng = random_case(arch)
    logits, _ = graph.forward(tokens, refs, np.ones((1, graph.n_edges)))
    close(logits[0], model(tokens))
    # and with every edge ablated to the senders' own outputs, still the engine
    outs = graph.forward(tokens, graph.zero_refs(), np.ones((1, graph.n_edges)))[1].outs
    own = {s: np.broadcast_to(o, (1, *tokens.shape, arch.d_model))[0] for s, o in outs.items()}
    close(graph.forward(tokens, own, np.zeros((1, graph.n_edges)))[0][0], model(tokens))


@pytest.mark.parametrize("every", [False, True])
def test_reading_the_logits_at_positions_is_the_full_run_there(arch, every):
    """One position per prompt, or every position of each (`--positions all`)."""
    _, graph, tokens, refs, rng = random_case(arch)
    B, T = tokens.shape
    if every:
        rows, index = np.repeat(np.arange(B), T), np.tile(np.arange(T), B)
    else:
        rows, index = np.arange(B), rng.integers(0, arch.n_ctx, B)
    masks = rng.uniform(0, 1, (3, graph.n_edges))
    full, full_trace = graph.forward(tokens, refs, masks)
    there, trace = graph.forward(tokens, refs, masks, (rows, index))
    close(there, full[:, rows, index], 1e-12)
    weights = rng.standard_normal(there.shape)
    scattered = np.zeros(full.shape)
    scattered[:, rows, index] = weights
    close(graph.backward(trace, weights)[1], graph.backward(full_trace, scattered)[1], 1e-10)


def grouped_edges(graph):
    """Pairs (edge, the edge it is tied to): a grouped model's key and value receivers of one
    group read one input in the model, so the hooks see the group's first head's edges."""
    cfg = graph.cfg
    group = cfg.n_heads // cfg.n_kv_heads
    tied = []
    for e, (s, r) in enumerate(graph.edges):
        node, kind = graph.node_of(r), r[-1]
        if node.startswith("a") and kind in "kv" and r != node:
            L, h = (int(x) for x in node[1:].split("."))
            if h % group:
                tied.append((e, graph.edge_index(s, f"a{L}.{h - h % group}.{kind}")))
    return tied


def test_edge_ablation_and_its_gradient_equal_hooks_on_the_torch_bridge(arch):
    torch.set_num_threads(1)
    model, graph, tokens, refs, rng = random_case(arch)
    run = to_torch(model)
    tied = grouped_edges(graph)
    weights = rng.standard_normal((*tokens.shape, arch.vocab_out))
    for masks in (
        rng.integers(0, 2, graph.n_edges).astype(float),
        rng.uniform(0, 1, graph.n_edges),
    ):
        for e, first in tied:
            masks[e] = masks[first]
        logits, trace = graph.forward(tokens, refs, masks[None])
        mask = torch.tensor(masks, requires_grad=True)
        hooked = hooked_edge_logits(run, graph, tokens, refs, mask)
        close(logits[0], hooked.detach().numpy())
        (hooked * torch.tensor(weights)).sum().backward()
        dmask = graph.backward(trace, weights[None])[1][0]
        for e, first in tied:  # one mask entry moves every head of the group
            dmask[first] += dmask[e]
            dmask[e] = 0.0
        close(dmask, mask.grad.numpy())


def test_the_graph_has_the_models_own_senders_and_readers():
    rotary = EdgeGraph(random_case(ModelConfig(**{**BASE, **ARCHITECTURES["llama"]}))[0])
    assert rotary.senders[:2] == ["tok", "a0.0"]  # no position sender: q and k are turned
    short = EdgeGraph(random_case(ModelConfig(**{**BASE, **ARCHITECTURES["shortformer"]}))[0])
    assert "pos" not in short.senders and ("tok", "a0.3.k") in short.edges
    parallel = EdgeGraph(random_case(ModelConfig(**{**BASE, **ARCHITECTURES["pythia"]}))[0])
    assert ("a1.0", "m1") not in parallel.edges and ("m0", "m1") in parallel.edges
    assert ("a0.0", "m1") in parallel.edges
