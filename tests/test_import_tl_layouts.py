"""A TransformerLens 4 `TransformerBridge` around a Hugging Face GPT-2 stores its attention
output and MLP in GPT-2's Conv1D layout (in, out) under the very names the native bridge uses
for nn.Linear's (out, in). Square weights look alike either way: the import must decide the
layout against TransformerLens's own forward pass, or refuse. Never import the wrong one."""

import json

import numpy as np
import pytest
import torch
from clitools import assert_one_line_error, cli
from test_import_tl import CASES, legacy_state, tl_model
from transformer_lens.model_bridge import TransformerBridge
from transformers import GPT2Config, GPT2LMHeadModel

from flatformer.errors import FlatformerError
from flatformer.importers import tl_source, tlens
from flatformer.model.transformer import Transformer


def hf_bridge(folder, n_inner, dtype=torch.float64, scale=None):
    """A GPT-2 saved by `save_pretrained` and loaded by `TransformerBridge.boot_transformers`,
    as a user does; `scale` replaces GPT-2's small initial weights by larger random ones."""
    torch.manual_seed(0)
    hf = GPT2Config(vocab_size=40, n_positions=12, n_embd=16, n_layer=2, n_head=4,
                    n_inner=n_inner, bos_token_id=None, eos_token_id=None)  # fmt: skip
    model = GPT2LMHeadModel(hf).to(dtype).eval()
    if scale:
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, scale)
    model.save_pretrained(folder / "gpt2", safe_serialization=True)
    bridge = TransformerBridge.boot_transformers(str(folder / "gpt2"), dtype=dtype).eval()
    return bridge, model


def saved(folder, bridge, drop=()):
    """The bridge's state dict and `cfg.to_dict()` as JSON, as the import guide says to save."""
    torch.save(bridge.state_dict(), folder / "bridge.pt")
    cfg = {k: (v if isinstance(v, (int, float, str, bool, type(None), list)) else str(v))
           for k, v in bridge.cfg.to_dict().items() if k not in drop}  # fmt: skip
    (folder / "cfg.json").write_text(json.dumps(cfg))
    return folder / "bridge.pt", folder / "cfg.json"


def ours(imported, tokens):
    tensors = {k: v.astype(np.float64) for k, v in imported.tensors.items()}
    return Transformer(imported.cfg, tensors)(tokens)


TOKENS = np.random.default_rng(1).integers(0, 40, (4, 12))


@pytest.mark.parametrize("n_inner", [16, 64], ids=["square-mlp", "wide-mlp"])
@pytest.mark.parametrize("scale", [None, 0.3], ids=["gpt2-init", "large-weights"])
def test_a_hf_gpt2_bridge_imports_equal_to_the_bridge_and_to_gpt2(tmp_path, n_inner, scale):
    torch.set_num_threads(1)
    bridge, model = hf_bridge(tmp_path, n_inner, scale=scale)
    imported = tlens.read(*saved(tmp_path, bridge))
    assert imported.provenance["layout"]["conv1d"] == ["o", "in", "out"]
    with torch.no_grad():
        expected = bridge(torch.tensor(TOKENS)).double().numpy()
        hf_logits = model(torch.tensor(TOKENS)).logits.double().numpy()
    assert np.abs(ours(imported, TOKENS) - expected).max() < 1e-9
    assert np.abs(ours(imported, TOKENS) - hf_logits).max() < 1e-9


def test_the_command_names_the_layout_it_proved(tmp_path):
    torch.set_num_threads(1)
    bridge, _ = hf_bridge(tmp_path, 16, scale=0.3)
    path, cfg = saved(tmp_path, bridge)
    result = cli("import", path, "--config", cfg, "--out", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert "Conv1D's (in, out) for the attention output" in result.stdout
    assert "GPT2LMHeadModel" in result.stdout
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["imported"]["layout"]["conv1d"] == ["o", "in", "out"]


def test_without_transformer_lens_a_square_layout_is_refused(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    bridge, _ = hf_bridge(tmp_path, 64, scale=0.3)
    monkeypatch.setattr(tl_source, "bridge_forward", lambda *a: "TransformerLens is absent")
    with pytest.raises(FlatformerError, match=r"blocks\.0\.attn\.o\.weight is square.*get_params"):
        tlens.read(*saved(tmp_path, bridge))


def test_a_config_naming_no_architecture_is_refused_when_square(tmp_path):
    torch.set_num_threads(1)
    bridge, _ = hf_bridge(tmp_path, 16, scale=0.3)
    path, cfg = saved(tmp_path, bridge, drop=("architecture",))
    assert_one_line_error(
        cli("import", path, "--config", cfg, "--out", tmp_path / "run"),
        "names no architecture",
        "GPT2LMHeadModel",
    )
    assert not (tmp_path / "run").exists()


def test_logits_no_reading_reproduces_are_refused(tmp_path, monkeypatch):
    """A forward flatformer's engine cannot match (here: the bridge's logits, shifted) is never
    imported under the nearest reading."""
    torch.set_num_threads(1)
    bridge, _ = hf_bridge(tmp_path, 16, scale=0.3)
    real = tl_source.bridge_forward

    def shifted(*args):
        forward = real(*args)
        return lambda tokens: forward(tokens) + 0.01

    monkeypatch.setattr(tl_source, "bridge_forward", shifted)
    with pytest.raises(FlatformerError, match="no reading of the bridge's weights reproduces"):
        tlens.read(*saved(tmp_path, bridge))


def test_shapes_alone_decide_where_no_weight_is_square(tmp_path, monkeypatch):
    """A native bridge with n_heads * d_head != d_model and d_mlp != d_model: each weight fits
    one layout only, so the import needs no TransformerLens to be right."""
    torch.set_num_threads(1)
    c = dict(CASES["gelu-ln"], d_head=3)
    bridge = tl_model(c, legacy_state(c, torch.float64), torch.float64)
    monkeypatch.setattr(tl_source, "bridge_forward", lambda *a: "TransformerLens is absent")
    imported = tlens.read(*saved(tmp_path, bridge))
    assert imported.provenance["layout"] == {
        "conv1d": [],
        "decided_by": "the only one its shapes allow",
    }
    tokens = TOKENS[:, : c["n_ctx"]] % c["d_vocab"]
    with torch.no_grad():
        expected = bridge(torch.tensor(tokens)).double().numpy()
    assert np.abs(ours(imported, tokens) - expected).max() < 1e-9


def test_get_params_of_a_hf_bridge_imports_in_one_layout(tmp_path, monkeypatch):
    """What the refusal suggests: `bridge.get_params()` holds HookedTransformer's names and
    layout whatever the bridge wraps, so it imports without TransformerLens."""
    torch.set_num_threads(1)
    bridge, model = hf_bridge(tmp_path, 16, scale=0.3)
    _, cfg = saved(tmp_path, bridge)
    torch.save({k: v.detach().clone() for k, v in bridge.get_params().items()}, tmp_path / "p.pt")
    monkeypatch.setattr(tl_source, "bridge_forward", lambda *a: pytest.fail("not needed"))
    imported = tlens.read(tmp_path / "p.pt", cfg)
    with torch.no_grad():
        hf_logits = model(torch.tensor(TOKENS)).logits.double().numpy()
    assert np.abs(ours(imported, TOKENS) - hf_logits).max() < 1e-9
