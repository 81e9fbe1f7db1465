"""The graph page's recompute (flatformer/explorer/graph-model.js) under node's own test runner:
for every configuration the tests know, with random weights and random transcoders, every link
of the graph file recomputed in JavaScript from the file's `frozen` factors equals the weight
attribute() computed (float64, 1e-9), and its paths through the heads sum to it. Run by
tests/js/graph.test.js."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import CONFIGS, random_model
from flatformer.graph import attribute
from flatformer.graph.files import graph_document, qk_hooks
from flatformer.graph.prune import prune
from test_graph import random_transcoders

ROOT = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


def document(cfg, seed=0):
    """A graph file of a random model on a random prompt, nearly nothing pruned."""
    model = random_model(cfg, seed)
    tokens = np.random.default_rng(seed).integers(0, cfg.d_vocab, size=min(cfg.n_ctx, 6))
    transcoders = random_transcoders(model, seed=seed)
    graph = attribute(model, transcoders, tokens, keep=qk_hooks(cfg))
    pruned = prune(graph, 1.0, 1.0)
    vocab = [f"t{i}" for i in range(cfg.d_vocab)]
    doc = graph_document(graph, pruned, vocab, transcoders, "g", "", "random", 1.0)
    return doc, graph


def test_the_javascript_recompute_equals_python_under_node(tmp_path):
    cases = {}
    for name, cfg in CONFIGS.items():
        doc, graph = document(cfg)
        assert len(doc["links"]) >= 10
        # the file's weights are attribute()'s adjacency, so the recompute is held to that
        kinds = {graph.kind(i) for i in range(len(graph.adjacency))}
        cases[name] = {"doc": doc, "kinds": sorted(kinds)}
    recompute_under_node(cases, tmp_path)


def recompute_under_node(cases: dict, tmp_path):
    """tests/js/graph.test.js on `cases` (name -> {"doc": a graph document, ...}): the page's
    recompute of every case passes, and so do its two own tests."""
    path = tmp_path / "graphs.json"
    path.write_text(json.dumps(cases), encoding="utf-8")
    result = subprocess.run(
        [NODE, "--test", str(ROOT / "tests" / "js" / "graph.test.js")],
        capture_output=True,
        text=True,
        env={"GRAPH_FIXTURE": str(path), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"# pass {len(cases) + 2}" in result.stdout, result.stdout
