"""The page's JavaScript engine and measures under node's own test runner (no browser, no
packages): fixtures written here by the NumPy reference and the readout, run by
tests/js/engine.test.js and tests/js/state.test.js.

For every configuration the tests know (tests/conftest.py CONFIGS, b_O, the erf GELU and
d_vocab_out among them), with random weights: the parameter layout and the activation names,
every activation of the forward pass with and without knobs, and each measure the page shows
against its Python definition (KL, the logit lens, the sampler's distribution and entropy,
singular values and their top-k share, head means and mean ablation, the edge graph with edges
ablated and its mean outputs, the output landscape, the plane), to 1e-9 in float64.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import CONFIGS, random_model
from flatformer.analysis.circuits import TOP_K, head_circuits, top_k_mass
from flatformer.analysis.lens import logit_lens, stage_names
from flatformer.edges.graph import EdgeGraph
from flatformer.edges.methods import sender_outputs
from flatformer.engine.model import hook_names
from flatformer.explorer.export import flat_weights
from flatformer.explorer.page import CONSTANTS
from flatformer.readout import fit_plane, output_logits
from flatformer.readout.knobs import (
    combine,
    head_means,
    mean_head,
    mlp_off,
    positions_off,
    scale_scores,
    zero_head,
)
from flatformer.readout.probs import entropy, knob_kl, softmax
from flatformer.readout.sampling import distribution

ROOT = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")
SAMPLERS = [(1.0, 0, 1.0), (0.5, 0, 1.0), (2.0, 3, 1.0), (1.0, 0, 0.6), (0.7, 4, 0.8)]

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


def nested(x) -> list:
    """An array as JSON lists, -inf (a masked attention score) as null."""
    x = np.asarray(x, dtype=float)
    return np.where(np.isneginf(x), None, x).tolist()


def knob_sets(cfg, means):
    """(the page's knobs, the same as readout.knobs hooks), from none to several at once."""
    last = cfg.n_layers - 1
    several_js = {"headsOff": [f"{last}.0"], "beta": 1.7, "posOff": True}
    several = [zero_head(last, 0), scale_scores(1.7, n_layers=cfg.n_layers), positions_off()]
    if not cfg.attn_only:
        several_js["mlpOff"] = [0]
        several.append(mlp_off(0))
    mean_js = {"headsMean": {f"0.{cfg.n_heads - 1}": means[0].tolist()}}
    return [
        ("none", {}, {}),
        ("several", several_js, combine(*several)),
        ("mean", mean_js, mean_head(0, cfg.n_heads - 1, means)),
    ]


def grid_of(model, plane, bounds, G):
    """outputGrid's cells: centres row by row from the top, their argmax and entropy."""
    ys = bounds["y1"] - (np.arange(G) + 0.5) / G * (bounds["y1"] - bounds["y0"])
    xs = bounds["x0"] + (np.arange(G) + 0.5) / G * (bounds["x1"] - bounds["x0"])
    points = np.array([plane.lift([x, y]) for y in ys for x in xs])
    logits = output_logits(model, points)
    return logits.argmax(-1).tolist(), entropy(softmax(logits)).tolist()


def config_fixture(name, cfg, seed):
    rng = np.random.default_rng(100 + seed)
    model = random_model(cfg, seed)
    windows = rng.integers(0, cfg.d_vocab, (6, cfg.n_ctx))
    means = head_means(model, windows)
    prompts = [rng.integers(0, cfg.d_vocab, n).tolist() for n in (cfg.n_ctx, 3)]
    runs = []
    for tokens in prompts:
        base, _ = model.run_with_cache(tokens)
        for label, js, hooks in knob_sets(cfg, means):
            logits, cache = model.run_with_cache(tokens, hooks=hooks)
            runs.append(
                {
                    "knobs": label,
                    "js": js,
                    "tokens": tokens,
                    "logits": nested(logits[0]),
                    "cache": {hook: nested(cache[hook][0]) for hook in hook_names(cfg)},
                    "kl": knob_kl(base[0], logits[0]).tolist(),
                }
            )
    tokens = prompts[0]
    logits, _ = model.run_with_cache(tokens)
    lens = {label: softmax(x[0]).tolist() for label, x in logit_lens(model, tokens).items()}
    last = logits[0, -1]
    samplers = []
    for temperature, top_k, top_p in SAMPLERS:
        probs = distribution(last, temperature, top_k or None, top_p if top_p < 1 else None)
        samplers.append({"settings": [temperature, top_k, top_p], "probs": probs.tolist()})
    circuits = [
        {
            "layer": c.layer,
            "head": c.head,
            "QK": c.QK.tolist(),
            "OV": c.OV.tolist(),
            "qk": c.qk_singular.tolist(),
            "ov": c.ov_singular.tolist(),
            "qk_mass": top_k_mass(c.qk_singular, min(TOP_K, cfg.d_head)),
            "ov_mass": top_k_mass(c.ov_singular, min(TOP_K, cfg.d_head)),
        }
        for c in head_circuits(model)
    ]
    graph = EdgeGraph(model)
    outs = sender_outputs(graph, windows)
    refs = {s: out.mean(0) for s, out in outs.items()}
    keep = (rng.random(graph.n_edges) < 0.7).astype(float)
    edge_logits, _ = graph.forward(np.array([tokens]), refs, keep[None])
    points = rng.standard_normal((5, cfg.d_model))
    plane = fit_plane(rng.standard_normal((20, cfg.d_model)) * 2 + 0.3)
    bounds = {"x0": -2.5, "x1": 3.0, "y0": -1.5, "y1": 2.0}
    argmax, ent = grid_of(model, plane, bounds, 5)
    return {
        "name": name,
        "cfg": cfg.to_dict(),
        "shapes": [[n, list(s)] for n, s in cfg.param_shapes().items()],
        "n_params": cfg.n_params,
        "hooks": hook_names(cfg),
        "flat": flat_weights(cfg, model.tensors).tolist(),
        "runs": runs,
        "lens": {"stages": [[label, hook] for label, hook in stage_names(model)], "probs": lens},
        "samplers": samplers,
        "entropy": entropy(softmax(last)).tolist(),
        "circuits": circuits,
        "top_k": TOP_K,
        "windows": windows.tolist(),
        "head_means": {str(layer): m.tolist() for layer, m in means.items()},
        "edges": {
            "edges": [list(e) for e in graph.edges],
            "refs": {s: r.tolist() for s, r in refs.items()},
            "keep": keep.tolist(),
            "logits": edge_logits[0, 0].tolist(),
        },
        "output_map": {"points": points.tolist(), "logits": output_logits(model, points).tolist()},
        "grid": {
            "plane": {"mean": plane.mean.tolist(), "axes": plane.axes.tolist()},
            "bounds": bounds,
            "G": 5,
            "argmax": argmax,
            "entropy": ent,
        },
    }


def engine_fixture() -> dict:
    rng = np.random.default_rng(3)
    clouds = [
        rng.standard_normal((24, d)) * [3.0, 1.5, 0.5, 0.2, 0.1][:d] + 0.7 for d in (1, 2, 3, 5)
    ]
    planes = []
    for cloud in clouds:
        plane = fit_plane(cloud)
        planes.append(
            {
                "points": cloud.tolist(),
                "exact": plane.is_identity,
                "mean": plane.mean.tolist(),
                "axes": plane.axes.tolist(),
            }
        )
    configs = [config_fixture(name, cfg, i) for i, (name, cfg) in enumerate(CONFIGS.items())]
    return {"constants": CONSTANTS, "configs": configs, "planes": planes}


def test_the_javascript_engine_and_measures_equal_python_under_node(tmp_path):
    path = tmp_path / "engine.json"
    path.write_text(json.dumps(engine_fixture(), allow_nan=False))
    result = subprocess.run(
        [
            NODE,
            "--test",
            str(ROOT / "tests/js/engine.test.js"),
            str(ROOT / "tests/js/state.test.js"),
        ],
        env={"ENGINE_FIXTURE": str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout
    # every configuration was tested, measure by measure
    for name in CONFIGS:
        assert result.stdout.count(f" - {name}: ") == 10, name
    assert int(result.stdout.split("# pass ")[1].split()[0]) >= 10 * len(CONFIGS) + 2
