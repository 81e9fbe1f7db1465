"""The page's forward pass (explorer/model.js) on the newer architectures it computes: RMSNorm,
rotary positions (halves or neighbouring pairs, partial), gated MLPs (SwiGLU, GeGLU), any eps
and attention both ways (causal: false), held to the NumPy reference under node
(tests/js/architectures.test.js): every activation, the logits, with and without knobs, the
one-vector helpers, and the circuit panel's edge graph (edges.js) against flatformer.edges, to
1e-9 in float64."""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from flatformer.config import ModelConfig
from flatformer.edges.graph import EdgeGraph
from flatformer.edges.methods import sender_outputs
from flatformer.engine.model import hook_names, init_params
from flatformer.explorer.export import flat_weights
from flatformer.explorer.page import CONSTANTS
from flatformer.model.transformer import Transformer
from test_architectures import ARCHITECTURES
from flatformer.readout.knobs import combine, mlp_off, positions_off, scale_scores, zero_head

ROOT = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

BASE = dict(d_model=16, n_heads=4, d_head=4, n_layers=2, d_mlp=24, n_ctx=7, d_vocab=11)
PAGE_ARCHITECTURES = {
    # Llama without grouped keys: RMSNorm, rotary halves, SwiGLU
    "llama": dict(normalization="pre_rms", eps=1e-6, positional_embedding_type="rotary",
                  gated_mlp=True, act_fn="silu", attn_out=True, ln_final=True, unembed_bias=False),
    "rms-only": dict(normalization="pre_rms", ln_final=True, attn_out=True),
    # GPT-J's neighbouring pairs, a quarter of each head turned, GeGLU, q, k, v biases
    "rotary-adjacent-geglu": dict(normalization="pre_ln", eps=1e-6, positional_embedding_type="rotary",
                                  rotary_dim=2, rotary_adjacent_pairs=True, gated_mlp=True,
                                  act_fn="gelu", qkv_bias=True, attn_out=True, ln_final=True),
    # Pythia's partial rotary halves with the exact GELU and b_O, sequential blocks
    "rotary-partial": dict(normalization="pre_ln", positional_embedding_type="rotary", rotary_dim=2,
                           rotary_base=1e4, act_fn="gelu_erf", qkv_bias=True, attn_out=True,
                           attn_out_bias=True, ln_final=True),
    # attending both ways (compiled RASP programs, tracr's bidirectional models): no mask,
    # fewer output classes than input tokens; with LayerNorm and rotary positions as well
    "bidirectional": dict(causal=False, act_fn="relu", attn_out=True, d_vocab_out=5),
    "bidirectional-rotary": dict(causal=False, normalization="pre_ln", positional_embedding_type="rotary",
                                 attn_out=True, ln_final=True),
}  # fmt: skip
# and the engine's every newer architecture: grouped keys and values, parallel blocks, SoLU,
# shortformer positions, GPT-Neo's local layers
EVERY = {**PAGE_ARCHITECTURES, **{f"engine-{k}": v for k, v in ARCHITECTURES.items()}}


def nested(x) -> list:
    x = np.asarray(x, dtype=float)
    return np.where(np.isneginf(x), None, x).tolist()


def fixture(name, cfg, seed) -> dict:
    rng = np.random.default_rng(seed)
    params = init_params(cfg, [np.random.default_rng(seed)])
    for key, view in params.views.items():
        if "ln" in key or "b_" in key:
            view += 0.3 * rng.standard_normal(view.shape)
    model = Transformer(cfg, params.seed(0))
    several_js = {"headsOff": ["1.0"], "beta": 1.7}
    several = [zero_head(1, 0), scale_scores(1.7, n_layers=2)]
    if not cfg.attn_only:
        several_js["mlpOff"] = [0]
        several.append(mlp_off(0))
    if not cfg.rotary:
        several_js["posOff"] = True
        several.append(positions_off())
    knobs = [("none", {}, {}), ("several", several_js, combine(*several))]
    runs = []
    for tokens in (rng.integers(0, cfg.d_vocab, n).tolist() for n in (cfg.n_ctx, 3)):
        for label, js, hooks in knobs:
            logits, cache = model.run_with_cache(tokens, hooks=hooks)
            runs.append({"knobs": label, "js": js, "tokens": tokens, "logits": nested(logits[0]),
                         "cache": {h: nested(cache[h][0]) for h in hook_names(cfg)}})  # fmt: skip
    graph = EdgeGraph(model)
    windows = rng.integers(0, cfg.d_vocab, (4, cfg.n_ctx))
    refs = {s: out.mean(0) for s, out in sender_outputs(graph, windows).items()}
    keep = (rng.random(graph.n_edges) < 0.7).astype(float)
    tokens = runs[0]["tokens"]
    edge_logits = graph.forward(np.array([tokens]), refs, keep[None])[0]
    return {
        "name": name,
        "cfg": cfg.to_dict(),
        "edges": {
            "edges": [list(e) for e in graph.edges],
            "windows": windows.tolist(),
            "refs": {s: r.tolist() for s, r in refs.items()},
            "keep": keep.tolist(),
            "logits": edge_logits[0, 0].tolist(),
        },
        "shapes": [[n, list(s)] for n, s in cfg.param_shapes().items()],
        "hooks": hook_names(cfg),
        "flat": flat_weights(cfg, model.tensors).tolist(),
        "runs": runs,
    }


def test_the_page_forward_pass_computes_the_newer_architectures_as_python(tmp_path):
    configs = [
        fixture(name, ModelConfig(**{**BASE, **arch}), i)
        for i, (name, arch) in enumerate(EVERY.items())
    ]
    path = tmp_path / "architectures.json"
    path.write_text(json.dumps({"constants": CONSTANTS, "configs": configs}, allow_nan=False))
    result = subprocess.run(
        [NODE, "--test", str(ROOT / "tests/js/architectures.test.js")],
        env={"ARCH_FIXTURE": str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout
    assert int(result.stdout.split("# pass ")[1].split()[0]) == 4 * len(EVERY)
