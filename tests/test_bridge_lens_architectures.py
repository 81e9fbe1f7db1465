"""`to_transformer_lens` of the newer architectures (RMSNorm, rotary positions with halves or
neighbouring pairs and partial rotation, gated MLPs with their biases, parallel blocks,
grouped-query attention, SiLU, SoLU with its LayerNorm, local layers, shortformer positions,
eps != 1e-5): the
TransformerBridge's logits and every hook it shares with the engine equal the engine's,
float64, 1e-9."""

import numpy as np
import pytest
import torch
import transformer_lens  # noqa: F401  (the extra this module needs)

from flatformer.config import ModelConfig
from flatformer.model.bridge import to_transformer_lens
from test_architectures import ARCHITECTURES, BASE
from test_views_architectures import close, random_model

# What TransformerLens 4.3's bridge records differently, or not at all: hook_normalized before
# the gain (and bias), hook_attn_scores after the softmax; it has no hook_rot_q, hook_rot_k
# (its hook_q and hook_k are before the turn, as ours) nor a SoLU MLP's hook_mid.
ABSENT = ("attn.hook_rot_q", "attn.hook_rot_k", "mlp.hook_mid")


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_the_transformer_lens_bridge_computes_the_engines_numbers(name):
    cfg = ModelConfig(**{**BASE, **ARCHITECTURES[name]})
    model = random_model(cfg, seed=1)
    tokens = np.random.default_rng(0).integers(0, cfg.d_vocab, (3, cfg.n_ctx))
    logits, cache = model.run_with_cache(tokens)
    with torch.no_grad():
        theirs, tl_cache = to_transformer_lens(model).run_with_cache(torch.tensor(tokens))
    close(theirs.numpy(), logits)
    compared = 0
    for hook in model.hook_names:
        if hook.endswith(ABSENT):
            assert hook not in tl_cache, hook
            continue
        got, ours = tl_cache[hook].numpy(), cache[hook]
        assert got.shape == ours.shape, hook
        if hook.endswith("hook_attn_scores"):
            close(got, cache[hook.replace("attn_scores", "pattern")])
            continue
        if hook.endswith("hook_normalized"):
            norm = hook.rsplit(".", 1)[0]
            got = got * model.tensors[norm + ".w"]
            if norm + ".b" in model.tensors:
                got = got + model.tensors[norm + ".b"]
        close(got, ours)
        compared += 1
    assert compared >= len(model.hook_names) - 2 * cfg.n_layers * 3
