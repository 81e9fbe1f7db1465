"""TransformerLens state dicts: a model built by TransformerLens 4, saved in the legacy
(`HookedTransformer`) names or the bridge's, imported and compared with TransformerLens itself."""

import json

import numpy as np
import pytest
import torch
from transformer_lens import config as tl_config
from transformer_lens.model_bridge.sources.native import boot
from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

from flatformer.errors import FlatformerError
from flatformer.importers import tlens
from flatformer.model.transformer import Transformer


# The grokking config of TransformerLens's own demo (attention-free of LayerNorm, d_vocab_out
# smaller than d_vocab), shrunk, with a JSON-style hand-written config.
GROKKING = dict(
    n_layers=1, n_heads=4, d_model=16, d_head=4, d_mlp=32, act_fn="relu",
    normalization_type=None, d_vocab=14, d_vocab_out=13, n_ctx=3, init_weights=True,
    device="cpu", seed=999,
)  # fmt: skip
CASES = {
    "grokking": GROKKING,
    "attn-only": dict(GROKKING, attn_only=True, n_layers=2, d_mlp=None, n_ctx=8),
    "gelu-ln": dict(GROKKING, act_fn="gelu", normalization_type="LN", n_layers=2, n_ctx=8),
    "gelu_new-ln": dict(GROKKING, act_fn="gelu_new", normalization_type="LN", d_model=24, n_ctx=8),
}


def legacy_state(c, dtype, seed=0):
    """Random weights in HookedTransformer's names and shapes, its buffers included."""
    g = torch.Generator().manual_seed(seed)
    d, H, dh, T = c["d_model"], c["n_heads"], c["d_head"], c["n_ctx"]
    m, V, Vo = c.get("d_mlp"), c["d_vocab"], c.get("d_vocab_out", c["d_vocab"])

    def r(*shape, scale=0.3):
        return scale * torch.randn(*shape, generator=g, dtype=dtype)

    s = {"embed.W_E": r(V, d, scale=1.0), "pos_embed.W_pos": r(T, d, scale=1.0)}
    ln = c.get("normalization_type") == "LN"
    for i in range(c["n_layers"]):
        b = f"blocks.{i}."
        for j in (1,) if c.get("attn_only") else (1, 2):
            if ln:
                s[b + f"ln{j}.w"], s[b + f"ln{j}.b"] = 1 + r(d), r(d)
        for w in "QKV":
            s[b + f"attn.W_{w}"], s[b + f"attn.b_{w}"] = r(H, d, dh), r(H, dh)
        s[b + "attn.W_O"], s[b + "attn.b_O"] = r(H, dh, d), r(d)
        s[b + "attn.mask"] = torch.tril(torch.ones(T, T, dtype=torch.bool))
        s[b + "attn.IGNORE"] = torch.tensor(-torch.inf)
        if not c.get("attn_only"):
            s[b + "mlp.W_in"], s[b + "mlp.b_in"] = r(d, m), r(m)
            s[b + "mlp.W_out"], s[b + "mlp.b_out"] = r(m, d), r(d)
    if ln:
        s["ln_final.w"], s["ln_final.b"] = 1 + r(d), r(d)
    s["unembed.W_U"], s["unembed.b_U"] = r(d, Vo, scale=1.0), r(Vo)
    return s


def tl_model(c, state, dtype):
    """TransformerLens's own model (TransformerLens 4's native bridge) holding `state`."""
    cfg = tl_config.TransformerBridgeConfig(
        **{k: v for k, v in c.items() if k not in ("device", "seed")},
        architecture="TransformerLensNative",
        dtype=dtype,
    )
    bridge = boot(cfg, dtype=dtype)
    bridge.load_state_dict(convert_tl_checkpoint(state, cfg), strict=True)
    return bridge.eval()


def save(folder, state, c, suffix):
    path = folder / f"model{suffix}"
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, path)
    else:
        torch.save(state, path)
    (folder / "cfg.json").write_text(json.dumps(c))
    return path, folder / "cfg.json"


def greedy(step, tokens, n, n_ctx):
    tokens = list(tokens)
    for _ in range(n):
        tokens.append(int(np.argmax(step(np.array([tokens[-n_ctx:]]))[0, -1])))
    return tokens


def check_against(bridge, imported, c, tol, seed=0):
    model = Transformer(
        imported.cfg, {k: v.astype(np.float64) for k, v in imported.tensors.items()}
    )
    tokens = np.random.default_rng(seed).integers(0, c["d_vocab"], (5, c["n_ctx"]))
    with torch.no_grad():
        expected = bridge(torch.tensor(tokens)).double().numpy()

        def source_step(t):
            return bridge(torch.tensor(t)).double().numpy()

        ours = model(tokens)
        assert ours.shape == expected.shape
        assert np.abs(ours - expected).max() < tol
        n = c.get("d_vocab_out", c["d_vocab"])
        start = [int(x) for x in np.arange(2) % n]
        assert greedy(model, start, 12, c["n_ctx"]) == greedy(source_step, start, 12, c["n_ctx"])


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("names", ["legacy", "bridge"])
def test_imported_tl_logits_and_greedy_tokens_equal_transformer_lens(tmp_path, case, names):
    torch.set_num_threads(1)
    c = CASES[case]
    legacy = legacy_state(c, torch.float64)
    bridge = tl_model(c, legacy, torch.float64)
    state = legacy if names == "legacy" else bridge.state_dict()
    suffix = ".pt" if (names == "legacy") == (case in ("grokking", "gelu-ln")) else ".safetensors"
    # A bridge's config names the model it wraps, as `cfg.to_dict()` writes it.
    saved_cfg = c if names == "legacy" else dict(c, architecture="TransformerLensNative")
    imported = tlens.read(*save(tmp_path, state, saved_cfg, suffix))
    check_against(bridge, imported, c, 1e-9)
    assert imported.provenance["format"] == (
        "transformer-lens" if names == "legacy" else "transformer-lens-bridge"
    )
    assert imported.cfg.vocab_out == c["d_vocab_out"] and imported.cfg.d_vocab == c["d_vocab"]
    assert imported.cfg.attn_only == bool(c.get("attn_only"))
    assert len(imported.provenance["sha256"]) == 64


def test_a_float32_tl_model_stays_float32_and_agrees_to_1e_5(tmp_path):
    c = dict(CASES["gelu-ln"], dtype="torch.float32")
    bridge = tl_model({k: v for k, v in c.items() if k != "dtype"}, legacy_state(c, torch.float32),
                      torch.float32)  # fmt: skip
    c = dict(c, architecture="TransformerLensNative")
    imported = tlens.read(*save(tmp_path, bridge.state_dict(), c, ".safetensors"))
    assert all(t.dtype == np.float32 for t in imported.tensors.values())
    check_against(bridge, imported, c, 1e-5)


def test_a_full_bridge_config_with_every_field_imports(tmp_path):
    """The whole `TransformerBridgeConfig.to_dict()`, as a user would save it, is understood."""
    c = CASES["gelu_new-ln"]
    bridge = tl_model(c, legacy_state(c, torch.float64), torch.float64)
    full = {k: (v if isinstance(v, (int, float, str, bool, type(None), list)) else str(v))
            for k, v in bridge.cfg.to_dict().items()}  # fmt: skip
    path, cfg = save(tmp_path, bridge.state_dict(), full, ".pt")
    check_against(bridge, tlens.read(path, cfg), c, 1e-9)


def test_folded_layernorm_lnpre_is_layernorm_with_unit_gains(tmp_path):
    """TransformerLens's fold_ln leaves LayerNorm without gain or bias (LNPre). Its LNPre runs
    in float32 even in a float64 model, so the float64 oracle is its LN with unit gains."""
    c = CASES["gelu-ln"]
    legacy = legacy_state(c, torch.float64)
    for k in list(legacy):
        if k.endswith((".w", ".b")) and ("ln" in k):
            legacy[k] = torch.ones_like(legacy[k]) if k.endswith(".w") else 0 * legacy[k]
    bridge = tl_model(c, legacy, torch.float64)
    folded = {k: v for k, v in legacy.items() if not k.startswith(("ln_final", "blocks.0.ln",
                                                                   "blocks.1.ln"))}  # fmt: skip
    cfg = dict(c, normalization_type="LNPre", layer_norm_folding=True)
    imported = tlens.read(*save(tmp_path, folded, cfg, ".pt"))
    check_against(bridge, imported, c, 1e-9)
    assert any("LNPre" in change for change in imported.provenance["changes"])


# Every field of TransformerLens 3.5's `HookedTransformerConfig.to_dict()` at the value it
# writes for a model with none of their features, and fields of other versions at theirs.
TL3_DEFAULTS = dict(
    model_name="custom", use_attn_scale=True, attn_scale=2.0, use_hook_mlp_in=False,
    use_attn_in=False, use_qk_norm=False, use_local_attn=False,
    ungroup_grouped_query_attention=False, original_architecture=None, from_checkpoint=False,
    checkpoint_index=None, checkpoint_label_type=None, checkpoint_value=None,
    tokenizer_name=None, window_size=None, attn_types=None, init_mode="gpt2", n_devices=1,
    attention_dir="causal", initializer_range=0.2, init_weights=True,
    scale_attn_by_inverse_layer_idx=False, final_rms=False, parallel_attn_mlp=False,
    rotary_dim=None, n_params=4096, use_hook_tokens=False, gated_mlp=False,
    dtype="torch.float64", tokenizer_prepends_bos=None, post_embedding_ln=False,
    rotary_base=10000, rotary_base_local=None, rotary_scaling_factor=1.0,
    trust_remote_code=False, rotary_adjacent_pairs=False, load_in_4bit=False, num_experts=None,
    experts_per_token=None, relative_attention_max_distance=None,
    relative_attention_num_buckets=None, decoder_start_token_id=None,
    tie_word_embeddings=False, use_normalization_before_and_after=False,
    attn_scores_soft_cap=-1.0, output_logits_soft_cap=-1.0, use_NTK_by_parts_rope=False,
    NTK_by_parts_low_freq_factor=1.0, NTK_by_parts_high_freq_factor=4.0,
    NTK_by_parts_factor=8.0, NTK_original_ctx_len=8192, use_yarn_rope=False, yarn_factor=1.0,
    yarn_attention_factor=1.0, yarn_beta_fast=32.0, yarn_beta_slow=1.0,
    yarn_original_max_position_embeddings=4096, norm_topk_prob=False, device="cpu",
    use_attn_result=False, use_split_qkv_input=False, default_prepend_bos=True,
    positional_embedding_type="standard", n_key_value_heads=None, uses_rms_norm=False,
    layer_norm_folding=False, clip_qkv=None, use_attention_sinks=False,
)  # fmt: skip


def test_a_config_as_transformer_lens_3_writes_it_imports(tmp_path):
    """Fields at their neutral values are accepted whatever version wrote them; `attn_scale`
    rounded as a float32 config rounds it is sqrt(d_head)."""
    c = CASES["gelu-ln"]
    legacy = legacy_state(c, torch.float64)
    full = dict(TL3_DEFAULTS, **c, attn_scale=float(np.float32(2.0000001)))
    check_against(tl_model(c, legacy, torch.float64), tlens.read(*save(tmp_path, legacy,
                  full, ".pt")), c, 1e-9)  # fmt: skip


def test_every_feature_the_engine_lacks_is_named_in_one_refusal(tmp_path):
    c = dict(TL3_DEFAULTS, **CASES["gelu-ln"], positional_embedding_type="alibi",
             use_attention_sinks=True, clip_qkv=8.0)  # fmt: skip
    with pytest.raises(FlatformerError) as refusal:
        tlens.read(*save(tmp_path, legacy_state(c, torch.float64), c, ".pt"))
    message = str(refusal.value)
    assert "\n" not in message
    for named in ("ALiBi", "use_attention_sinks = True", "clip_qkv = 8.0"):
        assert named in message


def test_an_attention_only_model_ignores_its_unused_activation(tmp_path):
    """TransformerLens ships attn-only-Nl with `act_fn = "solu_ln"`, which no layer uses."""
    c = dict(CASES["attn-only"], act_fn="solu_ln")
    legacy = legacy_state(c, torch.float64)
    oracle = tl_model(dict(c, act_fn="relu"), legacy, torch.float64)
    check_against(oracle, tlens.read(*save(tmp_path, legacy, c, ".pt")), c, 1e-9)
