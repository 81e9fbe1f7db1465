"""Attribution graphs of the newer architectures (RMSNorm's frozen scale as LayerNorm's, rotary
and shortformer positions inside the frozen attention, gated and SoLU MLPs replaced by their
transcoders, parallel blocks whose MLP reads the block's input, grouped keys and values, local
layers): exact as the classic block's (test_graph.check_exact, float64, 1e-9), their QK terms
summing to every score, and the graph page's JavaScript recompute of every link equal to
Python's under node."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from flatformer.config import ModelConfig
from flatformer.graph import attribute
from flatformer.graph.files import graph_document, qk_hooks
from flatformer.graph.prune import prune
from flatformer.graph.qk import qk_terms
from test_architectures import ARCHITECTURES, BASE
from test_graph import TOL, check_exact, random_transcoders
from test_graph_view_node import recompute_under_node
from test_views_architectures import random_model

ROOT = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")
CONFIGS = {name: ModelConfig(**{**BASE, **arch}) for name, arch in ARCHITECTURES.items()}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_replacement_model_of_every_newer_architecture_is_exact(name):
    model = random_model(CONFIGS[name], seed=2)
    tokens = np.random.default_rng(1).integers(0, model.cfg.d_vocab, 6)
    graph = check_exact(model, random_transcoders(model), tokens)
    if not model.cfg.attn_only:
        assert graph.n_features > 0


@pytest.mark.parametrize("name", ["llama", "pythia", "gpt-neo", "shortformer-mlp"])
def test_qk_terms_sum_to_every_score_of_every_head(name):
    model = random_model(CONFIGS[name], seed=3)
    cfg, T = model.cfg, 5
    tokens = np.random.default_rng(2).integers(0, cfg.d_vocab, T)
    graph = attribute(model, random_transcoders(model), tokens, keep=qk_hooks(cfg))
    _, real = model.run_with_cache(tokens)
    for L in range(cfg.n_layers):
        scores = real[f"blocks.{L}.attn.hook_attn_scores"][0]
        for h in range(cfg.n_heads):
            for q in range(T):
                for k in range(q + 1):
                    if np.isfinite(scores[h, q, k]):  # a local layer hides the older keys
                        assert abs(qk_terms(graph, L, h, q, k).sum() - scores[h, q, k]) < TOL


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_pages_recompute_of_every_link_equals_python_under_node(tmp_path):
    cases = {}
    for name, cfg in CONFIGS.items():
        model = random_model(cfg, seed=4)
        tokens = np.random.default_rng(4).integers(0, cfg.d_vocab, 6)
        transcoders = random_transcoders(model, seed=4)
        graph = attribute(model, transcoders, tokens, keep=qk_hooks(cfg))
        doc = graph_document(
            graph, prune(graph, 1.0, 1.0), [f"t{i}" for i in range(cfg.d_vocab)],
            transcoders, "g", "", "random", 1.0,
        )  # fmt: skip
        assert len(doc["links"]) >= 10
        cases[name] = {"doc": doc}
    recompute_under_node(cases, tmp_path)


def test_rmsnorm_with_its_own_scale_given_is_rmsnorm_and_linear():
    from flatformer.engine.components import rms_norm, rms_norm_frozen

    rng = np.random.default_rng(0)
    x, y, w = rng.standard_normal((3, 5, 8))
    out, _, scale = rms_norm(x, w, 1e-6)
    np.testing.assert_allclose(rms_norm_frozen(x, w, scale), out, rtol=0, atol=1e-15)
    both = rms_norm_frozen(2 * x - 3 * y, w, scale)
    np.testing.assert_allclose(
        both, 2 * rms_norm_frozen(x, w, scale) - 3 * rms_norm_frozen(y, w, scale), atol=1e-12
    )
