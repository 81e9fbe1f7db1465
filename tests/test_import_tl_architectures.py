"""TransformerLens state dicts (HookedTransformer's names) of the newer architectures, with
their configs as TransformerLens writes them (`normalization_type="RMS"`,
`positional_embedding_type="rotary"`, `gated_mlp`, `parallel_attn_mlp`, `n_key_value_heads`).

TransformerLens 4 removed HookedTransformer, and its native model is no float64 oracle for
these: it computes RMSNorm and the rotary angles in float32 and rotates neighbouring pairs
whatever `rotary_adjacent_pairs` says. So the configs' meaning is held to transformers' Llama
and GPT-NeoX, the models HookedTransformer loaded them from: the same weights, imported from a
Hugging Face folder and from a TransformerLens state dict, give transformers' logits to 1e-9;
and to TransformerLens 4's native model at float32's precision, where it computes the same."""

import json

import numpy as np
import pytest
import torch
from test_import_hf_modern import V, T, build, float64_internals
from transformer_lens import config as tl_config
from transformer_lens.model_bridge.sources.native import boot
from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

from flatformer.errors import FlatformerError
from flatformer.importers import hf_gpt2, tlens
from flatformer.model.transformer import Transformer


def tl_config_of(cfg):
    """The HookedTransformerConfig fields TransformerLens writes for a model of this config."""
    c = dict(
        d_model=cfg.d_model,
        d_head=cfg.d_head,
        n_heads=cfg.n_heads,
        n_layers=cfg.n_layers,
        n_ctx=cfg.n_ctx,
        d_vocab=cfg.d_vocab,
        d_mlp=cfg.d_mlp,
        act_fn={"silu": "silu", "gelu_erf": "gelu", "gelu": "gelu_new"}[cfg.act_fn],
        normalization_type="RMS" if cfg.normalization == "pre_rms" else "LN",
        final_rms=cfg.normalization == "pre_rms",
        eps=cfg.eps,
        positional_embedding_type="rotary",
        rotary_dim=cfg.rotated_dims,
        rotary_base=cfg.rotary_base,
        rotary_adjacent_pairs=False,
        gated_mlp=cfg.gated_mlp,
        parallel_attn_mlp=cfg.parallel_attn_mlp,
        n_key_value_heads=cfg.n_kv_heads if cfg.grouped else None,
        attn_only=False,
        original_architecture="LlamaForCausalLM",
    )
    return c


def save(folder, state, c):
    torch.save({k: torch.as_tensor(v) for k, v in state.items()}, folder / "model.pt")
    (folder / "cfg.json").write_text(json.dumps(c))
    return folder / "model.pt", folder / "cfg.json"


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt_neox"])
def test_a_transformer_lens_config_means_what_the_source_model_computes(tmp_path, kind):
    torch.set_num_threads(1)
    source = float64_internals(build(kind))
    source.save_pretrained(tmp_path / "hf")
    from_hf = hf_gpt2.read(tmp_path / "hf")
    state = dict(from_hf.tensors)
    state.update(
        {
            f"blocks.{i}.attn.{name}": torch.tril(torch.ones(T, T, dtype=torch.bool))
            for i in range(from_hf.cfg.n_layers)
            for name in ("mask",)
        }
    )  # HookedTransformer's buffers come along in its state dict
    imported = tlens.read(*save(tmp_path, state, tl_config_of(from_hf.cfg)))
    assert imported.cfg.replace(qkv_bias=False, attn_out_bias=False, unembed_bias=False) == (
        from_hf.cfg.replace(qkv_bias=False, attn_out_bias=False)
    )
    tokens = np.random.default_rng(0).integers(0, V, (3, T))
    with torch.no_grad():
        expected = source(torch.tensor(tokens)).logits.numpy()
    ours = Transformer(imported.cfg, imported.tensors)(tokens)
    assert np.abs(ours - expected).max() < 1e-9 * max(1.0, np.abs(expected).max())


def test_transformer_lens_4s_native_model_agrees_at_float32s_precision():
    """RMSNorm, neighbouring pairs rotated, SwiGLU and grouped keys: TransformerLens's own
    forward pass (float32 inside) and the import of its legacy state dict."""
    g = torch.Generator().manual_seed(0)
    c = dict(
        n_layers=2, n_heads=4, d_model=16, d_head=4, d_mlp=24, act_fn="silu", d_vocab=13,
        n_ctx=8, normalization_type="RMS", final_rms=True, eps=1e-6,
        positional_embedding_type="rotary", rotary_dim=4, rotary_adjacent_pairs=True,
        gated_mlp=True, n_key_value_heads=2,
    )  # fmt: skip
    d, H, dh, m = 16, 4, 4, 24

    def r(*shape, scale=0.3):
        return scale * torch.randn(*shape, generator=g, dtype=torch.float64)

    state = {"embed.W_E": r(13, d, scale=1.0), "ln_final.w": 1 + r(d)}
    for i in range(2):
        b = f"blocks.{i}."
        state.update({b + "ln1.w": 1 + r(d), b + "ln2.w": 1 + r(d), b + "attn.W_Q": r(H, d, dh)})
        state.update({b + "attn._W_K": r(2, d, dh), b + "attn._W_V": r(2, d, dh)})
        state.update({b + "attn.W_O": r(H, dh, d), b + "mlp.W_gate": r(d, m)})
        state.update({b + "mlp.W_in": r(d, m), b + "mlp.W_out": r(m, d)})
    state["unembed.W_U"] = r(d, 13, scale=1.0)
    native = boot(
        tl_config.TransformerBridgeConfig(**c, architecture="TransformerLensNative"),
        dtype=torch.float64,
    )
    native.load_state_dict(convert_tl_checkpoint(state, native.cfg), strict=False)
    imported = tlens.convert(c, {k: v.numpy() for k, v in state.items()})
    tokens = np.random.default_rng(0).integers(0, 13, (2, 8))
    with torch.no_grad():
        expected = native.eval()(torch.tensor(tokens)).numpy()
    ours = Transformer(imported.cfg, imported.tensors)(tokens)
    assert np.abs(ours - expected).max() < 1e-5 * np.abs(expected).max()
    assert imported.cfg.grouped and imported.cfg.rotary_adjacent_pairs


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(normalization_type="LN", final_rms=True), ["final_rms = True"]),
        (dict(positional_embedding_type="alibi"), ["ALiBi"]),
        (dict(n_key_value_heads=3), ["multiple of n_key_value_heads"]),
        (dict(use_NTK_by_parts_rope=True), ["use_NTK_by_parts_rope = True"]),
        (dict(attn_types=["global", "sliding"]), ["attn_types must be global or local"]),
    ],
)
def test_what_is_still_not_computed_is_refused_in_one_line(tmp_path, change, words):
    source = build("llama")
    source.save_pretrained(tmp_path / "hf")
    from_hf = hf_gpt2.read(tmp_path / "hf")
    c = {**tl_config_of(from_hf.cfg), **change}
    with pytest.raises(FlatformerError) as err:
        tlens.read(*save(tmp_path, from_hf.tensors, c))
    assert "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_a_bridge_state_dict_of_these_architectures_is_refused_naming_them(tmp_path):
    state = {"embed.weight": torch.zeros(13, 16), "blocks.0.ln1.weight": torch.ones(16)}
    c = dict(
        n_layers=1, n_heads=4, d_model=16, d_head=4, d_mlp=24, act_fn="silu", d_vocab=13,
        n_ctx=8, normalization_type="RMS", positional_embedding_type="rotary", gated_mlp=True,
    )  # fmt: skip
    with pytest.raises(FlatformerError) as err:
        tlens.read(*save(tmp_path, state, c))
    message = str(err.value)
    assert "\n" not in message
    assert "normalization_type = 'RMS'" in message and "gated_mlp = True" in message


def test_a_solu_model_imports_equal_to_transformer_lens(tmp_path):
    """TransformerLens's solu-1l to 4l: SoLU and its LayerNorm over the neurons (`mlp.ln`),
    which TransformerLens 4's native model computes in float64: held to it to 1e-9."""
    from test_import_tl import GROKKING, check_against, legacy_state, tl_model
    from test_import_tl import save as save_tl

    torch.set_num_threads(1)
    c = dict(GROKKING, act_fn="solu_ln", normalization_type="LN", n_layers=2, n_ctx=8)
    state = legacy_state(c, torch.float64)
    g = torch.Generator().manual_seed(1)
    for i in range(2):
        state[f"blocks.{i}.mlp.ln.w"] = 1 + 0.3 * torch.randn(32, generator=g, dtype=torch.float64)
        state[f"blocks.{i}.mlp.ln.b"] = 0.3 * torch.randn(32, generator=g, dtype=torch.float64)
    imported = tlens.read(*save_tl(tmp_path, state, c, ".pt"))
    assert imported.cfg.act_fn == "solu_ln" and "SoLU" in imported.cfg.newer_features()
    check_against(tl_model(c, state, torch.float64), imported, c, 1e-9)


def test_an_attention_only_shortformer_model_imports_as_transformer_lens_computes_it(tmp_path):
    """TransformerLens's attn-only-1l to 4l: LayerNorm, shortformer positions, `act_fn` solu_ln
    unused. The oracle is TransformerLens's block written out (its TransformerBlock passes
    `ln1(x) + pos` as the query and key inputs and `ln1(x)` as the value input; the stream
    never holds the positions)."""
    from test_import_tl import GROKKING, legacy_state
    from test_import_tl import save as save_tl

    c = dict(GROKKING, attn_only=True, d_mlp=None, n_layers=2, n_ctx=8, act_fn="solu_ln",
             normalization_type="LN", positional_embedding_type="shortformer")  # fmt: skip
    s = legacy_state(c, torch.float64)
    imported = tlens.read(*save_tl(tmp_path, s, c, ".pt"))
    assert imported.cfg.shortformer and imported.cfg.attn_only
    tokens = np.random.default_rng(0).integers(0, c["d_vocab"], (3, 8))

    def ln(x, name):
        x = x - x.mean(-1, keepdim=True)
        return x / (x.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * s[name + ".w"] + s[name + ".b"]

    t = torch.tensor(tokens)
    resid, pos = s["embed.W_E"][t], s["pos_embed.W_pos"][:8]
    causal = torch.tril(torch.ones(8, 8, dtype=torch.bool))
    for i in range(2):
        b = f"blocks.{i}."
        x = ln(resid, b + "ln1")
        q = torch.einsum("btd,hde->bthe", x + pos, s[b + "attn.W_Q"]) + s[b + "attn.b_Q"]
        k = torch.einsum("btd,hde->bthe", x + pos, s[b + "attn.W_K"]) + s[b + "attn.b_K"]
        v = torch.einsum("btd,hde->bthe", x, s[b + "attn.W_V"]) + s[b + "attn.b_V"]
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / 2.0
        pattern = scores.masked_fill(~causal, -torch.inf).softmax(-1)
        z = torch.einsum("bhqk,bkhe->bqhe", pattern, v)
        resid = resid + torch.einsum("bqhe,hed->bqd", z, s[b + "attn.W_O"]) + s[b + "attn.b_O"]
    expected = (ln(resid, "ln_final") @ s["unembed.W_U"] + s["unembed.b_U"]).numpy()
    ours = Transformer(imported.cfg, imported.tensors)(tokens)
    assert np.abs(ours - expected).max() < 1e-9 * np.abs(expected).max()
