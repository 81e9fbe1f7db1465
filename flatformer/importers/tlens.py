"""A TransformerLens state dict (`.pt` or `.safetensors`) with its config (`cfg.json`, the
fields of `HookedTransformerConfig` or TransformerLens 4's `TransformerBridgeConfig`).

Two naming schemes are read. The legacy one is `HookedTransformer.state_dict()`'s, which is
already flatformer's (`blocks.0.attn.W_Q` of shape (n_heads, d_model, d_head)). TransformerLens 4
removed `HookedTransformer`; its native `TransformerBridge` stores `nn.Linear` layouts instead
(`blocks.0.attn.q.weight` of shape (n_heads * d_head, d_model), `blocks.0.mlp.in.weight` (d_mlp,
d_model), `unembed.weight` (d_vocab_out, d_model)), the inverse of TransformerLens's own
`convert_tl_checkpoint`, undone here.

Weights are imported as stored. A config whose weights TransformerLens processed
(`layer_norm_folding`, `normalization_type="LNPre"`: LayerNorm without gain and bias, or centred
writing weights and unembedding) computes the same function as the stored tensors, so the
import is exact; LNPre becomes a LayerNorm with unit gains and zero biases, noted in provenance.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np

from ..config import ModelConfig
from ..errors import FlatformerError
from ..store.limits import number
from ..store.read import read_json
from ..model.transformer import Transformer
from . import tl_source, validate
from .common import Imported, as_array, refuse, sha256, torch_state

ACT_FNS = {
    "relu": "relu",
    "gelu": "gelu_erf",
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "silu": "silu",
    "solu_ln": "solu_ln",
}

# Fields that change the forward pass, with the value under which the engine computes it; any
# other value is refused by name.
NEUTRAL = {
    "use_qk_norm": (False, "query and key norms"),
    "scale_attn_by_inverse_layer_idx": (False, "attention scaled by 1/layer"),
    "use_attn_scale": (True, "attention not scaled by 1/sqrt(d_head)"),
    "use_yarn_rope": (False, "YaRN rotary scaling"),
    "post_embedding_ln": (False, "a LayerNorm after the embedding"),
    "num_experts": (None, "a mixture of experts"),
    "use_normalization_before_and_after": (False, "norms before and after each sublayer"),
    "rmsnorm_uses_offset": (False, "RMSNorm"),
    "relative_attention_num_buckets": (None, "relative attention"),
    "relative_attention_max_distance": (None, "relative attention"),
    "per_layer_head_dim": (None, "heads of different sizes per layer"),
    "per_layer_num_key_value_heads": (None, "grouped-query attention"),
    "load_in_4bit": (False, "4-bit quantized weights"),
    "scale_embedding": (None, "a scaled embedding"),
    "is_audio_model": (False, "an audio model"),
    "is_visual_model": (False, "a vision model"),
    "is_multimodal": (False, "a multimodal model"),
    "is_stateful": (False, "a stateful model"),
}
POSITIONS = {
    "shortformer": "shortformer positions",
    "alibi": "ALiBi attention biases",
    "relative_positional_bias": "relative position biases",
}
# The values of a field the importer does not know that leave the forward pass as it is.
OFF = (None, False)
SOFT_CAPS = ("output_logits_soft_cap", "attn_scores_soft_cap")
# Fields that do not change what the stored weights compute (devices, initialisation,
# tokenizer, hooks, checkpoint labels, rotary details without rotary, weight processing).
INERT = set(
    "device n_devices dtype seed init_mode initializer_range init_weights n_params model_name "
    "architecture original_architecture from_checkpoint checkpoint_index checkpoint_label_type "
    "checkpoint_value tokenizer_name tokenizer_prepends_bos tokenizer_appends_eos "
    "default_prepend_bos default_padding_side trust_remote_code use_attn_result "
    "use_split_qkv_input use_hook_mlp_in use_attn_in use_hook_tokens split_attention_weights "
    "attn_implementation ungroup_grouped_query_attention experts_per_token "
    "rotary_interleaved_cos_sin qk_norm_after_rope "
    "rotary_base_local rotary_scaling_factor yarn_factor yarn_attention_factor yarn_beta_fast "
    "yarn_beta_slow yarn_original_max_position_embeddings norm_topk_prob "
    "use_NTK_by_parts_rope NTK_by_parts_low_freq_factor NTK_by_parts_high_freq_factor "
    "NTK_by_parts_factor NTK_original_ctx_len decoder_start_token_id bos_token_id eos_token_id "
    "tie_word_embeddings "
    "vision_hidden_size vision_num_layers vision_num_heads mm_tokens_per_image "
    "fold_ln center_writing_weights center_unembed fold_value_biases "
    "refactor_factored_attn_matrices layer_norm_folding".split()
)
SIZES = ("d_model", "d_head", "n_heads", "n_layers", "n_ctx", "d_vocab")
HANDLED = set(SIZES) | {
    "attention_dir",
    "positional_embedding_type",
    "d_mlp",
    "d_vocab_out",
    "attn_only",
    "act_fn",
    "normalization_type",
    "normalization",
    "eps",
    "attn_scale",
    "n_key_value_heads",
    "attn_types",
    *SOFT_CAPS,
    # the architectures of the field's small models, read into the engine's own fields
    "rotary_dim",
    "rotary_base",
    "rotary_adjacent_pairs",
    "gated_mlp",
    "parallel_attn_mlp",
    "final_rms",
    "uses_rms_norm",
    "use_local_attn",
    "window_size",
}
BUFFERS = (".mask", ".IGNORE", ".rotary_sin", ".rotary_cos")
RMS = ("RMS", "RMSPre")
# What the bridge rebuilt to check an import against is given: the fields read here; any other
# field leaves the forward pass as it is.
SOURCE_FIELDS = (HANDLED - {"normalization"}) | set(NEUTRAL)


def read(path: Path, config_path: Path | None) -> Imported:
    path = Path(path)
    if config_path is None:
        raise FlatformerError(
            f"{path}: a TransformerLens state dict needs its config: --config cfg.json "
            "(the fields of HookedTransformerConfig)"
        )
    cfg_json = read_json(config_path, "TransformerLens config", 1_000_000)
    if not isinstance(cfg_json, dict):
        raise FlatformerError(f"{config_path}: a TransformerLens config must be an object")
    if path.suffix == ".safetensors":
        state = validate.read_safetensors(path)
    else:
        state = validate.state_dict(torch_state(path), str(path))
    try:
        imported = convert(cfg_json, state)
    except FlatformerError:
        raise
    except (TypeError, ValueError, AttributeError) as exc:  # a field or tensor of another type
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise FlatformerError(
            f"{path} with {config_path}: a value of the wrong type ({first})"
        ) from None
    imported.provenance.update(source=str(path), sha256=sha256(path))
    imported.provenance["config"] = {"source": str(config_path), "sha256": sha256(config_path)}
    return imported


def check_wrapped(c: dict) -> None:
    """Refuse a bridge's config around a Hugging Face model other than GPT-2: TransformerLens 4
    writes such a model's own fields beside its own, and its own leave out what the wrapped
    forward pass does (GPT-NeoX's partial rotary as `rotary_dim` None, GPT-Neo's local layers
    and unscaled scores), so the config cannot say what the weights compute."""
    arch = c.get("architecture")
    if arch in tl_source.NATIVE + tl_source.HF_GPT2 or not isinstance(arch, str):
        return
    raise FlatformerError(
        f"cannot import: a TransformerLens bridge around {arch} writes a config that does not "
        "say all its forward pass does; import the Hugging Face folder the bridge was booted "
        "from (`model.save_pretrained(folder)` before `boot_transformers`)"
    )


def check_fields(c: dict) -> None:
    """Refuse every feature the engine lacks, all of them by field and value in one line.

    A field the importer does not know is accepted at None or False (a feature absent or
    switched off, as every TransformerLens version writes its defaults) and refused at any
    other value, since it may change the forward pass."""
    found = []  # (field, value, what the engine lacks)
    norm = c.get("normalization_type", c.get("normalization", "LN"))
    if norm not in (None, "LN", "LNPre", *RMS):
        found.append(("normalization_type", norm, "a normalization other than LayerNorm or RMS"))
    if c.get("final_rms") and norm not in RMS:
        found.append(("final_rms", True, "a final RMSNorm after LayerNorm blocks"))
    if c.get("uses_rms_norm") and norm not in RMS:
        found.append(("uses_rms_norm", True, "RMSNorm with normalization_type " + repr(norm)))
    pos = c.get("positional_embedding_type", "standard")
    if pos not in ("standard", "rotary", "shortformer"):
        found.append(("positional_embedding_type", pos, POSITIONS.get(pos, "those positions")))
    if pos == "rotary":  # what changes the rotary angles, inert without rotary positions
        for name, neutral in (
            ("use_NTK_by_parts_rope", False),
            ("rotary_interleaved_cos_sin", False),
            ("rotary_scaling_factor", 1.0),
        ):
            if c.get(name) not in (None, neutral):
                found.append((name, c[name], "rotary angles scaled or laid out otherwise"))
    if c.get("parallel_attn_mlp") and c.get("attn_only"):
        found.append(("parallel_attn_mlp", True, "parallel attention without an MLP"))
    for name, (neutral, what) in NEUTRAL.items():
        if name in c and c[name] != neutral and not (neutral is None and c[name] is False):
            found.append((name, c[name], what))
    for name in SOFT_CAPS:
        if name in c and c[name] is not None and float(c[name]) > 0:
            found.append((name, c[name], "logit soft-capping"))
    if c.get("use_local_attn") and "local" not in (c.get("attn_types") or []):
        found.append(("use_local_attn", True, "local attention without attn_types naming it"))
    if c.get("attention_dir", "causal") not in ("causal", "bidirectional"):
        found.append(("attention_dir", c["attention_dir"], "neither causal nor bidirectional"))
    act = c.get("act_fn", "relu")
    if not c.get("attn_only") and act not in ACT_FNS:  # an attention-only model has no MLP
        found.append(("act_fn", act, f"the engine's activations are {', '.join(ACT_FNS)}"))
    unknown = sorted(set(c) - set(NEUTRAL) - INERT - HANDLED)
    found += [(k, c[k], "a field flatformer does not know") for k in unknown if c[k] not in OFF]
    if found:
        named = "; ".join(f"{name} = {value!r} ({what})" for name, value, what in found)
        raise FlatformerError(f"cannot import: {named}; flatformer's engine does not have it")


# How a bridge stores the weights whose layout depends on the model it wraps: nn.Linear's
# (out, in), or GPT-2's Conv1D (in, out). Query, key, value and unembedding are nn.Linear's in
# every bridge flatformer reads.
LAYOUTS = ("linear", "conv1d")
WRAPPED = ("o", "in", "out")


def legacy_names(state: dict, H: int, dh: int, conv1d: frozenset = frozenset()) -> dict:
    """TransformerLens 4 bridge names as HookedTransformer's, reading the parts named in
    `conv1d` (of WRAPPED) in Conv1D's layout and every other weight in nn.Linear's."""
    out = {}
    for key, tensor in state.items():
        t = as_array(tensor, key)
        stem, _, leaf = key.rpartition(".")
        part = stem.rpartition(".")[2]
        linear = part not in conv1d
        if stem in ("embed", "pos_embed") and leaf == "weight":
            out[stem + (".W_E" if stem == "embed" else ".W_pos")] = t
        elif part in ("ln1", "ln2") or stem == "ln_final" or stem.endswith(".mlp.ln"):
            out[f"{stem}.{'w' if leaf == 'weight' else 'b'}"] = t
        elif part in ("q", "k", "v") and stem.endswith(".attn." + part):
            base = stem[: -len(part)]
            rows = (H * dh, *np.shape(tensor)[1:2]) if leaf == "weight" else (H * dh,)
            validate.shape(key, tensor, rows, "TransformerLens state dict")
            if leaf == "weight":
                out[base + "W_" + part.upper()] = t.reshape(H, dh, -1).transpose(0, 2, 1)
            else:
                out[base + "b_" + part.upper()] = t.reshape(H, dh)
        elif stem.endswith(".attn.o"):
            base = stem[:-1]
            if leaf == "weight":
                w = t.T if linear else t  # (n_heads * d_head, d_model)
                if w.ndim != 2 or w.shape[0] != H * dh:
                    raise FlatformerError(
                        f"TransformerLens tensor {key} has shape {t.shape}, not n_heads * "
                        f"d_head ({H * dh}) by d_model"
                    )
                out[base + "W_O"] = w.reshape(H, dh, -1)
            else:
                out[base + "b_O"] = t
        elif stem.endswith((".mlp.in", ".mlp.out")):
            name = stem.rpartition(".")[0] + (".W_" if leaf == "weight" else ".b_") + part
            out[name] = t.T if leaf == "weight" and linear else t
        elif stem == "unembed":
            out["unembed.W_U" if leaf == "weight" else "unembed.b_U"] = (
                t.T if leaf == "weight" else t
            )
        else:
            raise FlatformerError(f"TransformerLens state dict: unknown tensor {key!r}")
    return out


def convert(c: dict, state: dict) -> Imported:
    check_wrapped(c)
    check_fields(c)
    c = {**c, **checked_sizes(c)}
    dh, H = c["d_head"], c["n_heads"]
    scale = c.get("attn_scale", -1.0)
    # Relative to float32's rounding: configs written from float32 values round sqrt(d_head).
    if scale not in (None, -1, -1.0) and abs(float(scale) / math.sqrt(dh) - 1) > 1e-6:
        refuse("attn_scale", scale, "attention not scaled by 1/sqrt(d_head)")
    state = {k: v for k, v in state.items() if not k.endswith(BUFFERS)}
    if "embed.weight" in state:
        newer = newer_fields(c)
        if newer:
            raise FlatformerError(
                f"cannot import: a TransformerLens 4 bridge state dict with {', '.join(newer)} "
                "is not read (TransformerLens's native model computes these in float32, so "
                "no layout can be proved against it); save the legacy state dict, "
                "HookedTransformer's names, with its config"
            )
        return read_bridge(c, state, H, dh)
    t = {k.replace("._W_", ".W_").replace("._b_", ".b_"): as_array(v, k) for k, v in state.items()}
    cfg, tensors, changes = assemble(c, t, H)
    return Imported(cfg, tensors, None, {"format": "transformer-lens", "changes": changes})


def d_mlp_of(t: dict, d: int) -> int:
    """The MLP's width as its first W_in stores it."""
    return t.get("blocks.0.mlp.W_in", np.zeros((d, 0))).shape[1]


def newer_fields(c: dict) -> list[str]:
    """The config's fields that ask for the newer architectures, as `field = value`."""
    norm = c.get("normalization_type", c.get("normalization", "LN"))
    asked = {
        "normalization_type": norm in RMS,
        "positional_embedding_type": c.get("positional_embedding_type")
        in ("rotary", "shortformer"),
        "gated_mlp": bool(c.get("gated_mlp")),
        "parallel_attn_mlp": bool(c.get("parallel_attn_mlp")),
        "n_key_value_heads": c.get("n_key_value_heads") not in (None, c.get("n_heads")),
    }
    return [f"{k} = {c.get(k, norm)!r}" for k, on in asked.items() if on]


def architecture(c: dict, d_head: int) -> dict:
    """The engine's fields for the config's architecture (RMSNorm, rotary positions, gated MLP,
    parallel attention and MLP, grouped-query attention), each at its default when off."""
    where = "TransformerLens config"
    out = {"eps": validate.eps(where, "eps", c.get("eps", 1e-5))}
    if c.get("positional_embedding_type") == "shortformer":
        out["positional_embedding_type"] = "shortformer"
    if c.get("positional_embedding_type") == "rotary":
        rotary_dim = c.get("rotary_dim")
        rotary_dim = (
            d_head
            if rotary_dim is None
            else validate.size(where, "rotary_dim", rotary_dim, "d_head")
        )
        base = c.get("rotary_base", 10000)
        out.update(
            positional_embedding_type="rotary",
            rotary_dim=0 if rotary_dim == d_head else rotary_dim,
            rotary_base=number(f"{where}: rotary_base", base, 1.0, 1e9),
            rotary_adjacent_pairs=validate.flag(
                where, "rotary_adjacent_pairs", c.get("rotary_adjacent_pairs", False)
            ),
        )
    for name in ("gated_mlp", "parallel_attn_mlp"):
        out[name] = validate.flag(where, name, c.get(name, False) or False)
    types = c.get("attn_types") or []
    if any(t != "global" for t in types):  # GPT-Neo's local layers (the config checks them)
        out["attn_types"] = tuple(types)
        out["window_size"] = c.get("window_size") or 0
    kv = c.get("n_key_value_heads")
    if kv is not None and kv != c["n_heads"]:
        out["n_key_value_heads"] = validate.size(where, "n_key_value_heads", kv, "n_heads")
    return out


def checked_sizes(c: dict) -> dict:
    """The config's sizes in `train`'s ranges, before anything is built from them: n_heads
    absent or -1 is d_model / d_head, d_mlp and d_vocab_out absent (or None, or -1) are
    taken from the weights and d_vocab."""
    where = "TransformerLens config"
    out = validate.sizes(
        c, {k: k for k in ("d_model", "d_head", "n_layers", "n_ctx", "d_vocab")}, where
    )
    heads = c.get("n_heads", -1)
    if heads in (None, -1):
        heads = validate.divides(where, "d_head", out["d_head"], "d_model", out["d_model"])
    out["n_heads"] = validate.size(where, "n_heads", heads, "n_heads")
    for name, engine_name in (("d_mlp", "d_mlp"), ("d_vocab_out", "d_vocab")):
        if c.get(name) not in (None, -1):
            out[name] = validate.size(where, name, c[name], engine_name)
    return out


def read_bridge(c: dict, state: dict, H: int, dh: int) -> Imported:
    """A bridge state dict, each layout-dependent weight read in the layout that reproduces the
    logits of TransformerLens's own bridge around the model the config names (`tl_source`);
    where that bridge cannot be built here, only a layout the shapes alone allow; else refused.
    """
    readings, first_refusal = [], None
    for n in range(len(WRAPPED) + 1):
        for conv1d in itertools.combinations(WRAPPED, n):
            try:
                cfg, tensors, changes = assemble(
                    c, legacy_names(state, H, dh, frozenset(conv1d)), H
                )
            except FlatformerError as exc:
                first_refusal = first_refusal or exc
                continue
            if not any(same(tensors, seen[2]) for seen in readings):
                readings.append((conv1d, cfg, tensors, changes))
    if not readings:
        raise first_refusal
    square = next(
        (k for k, v in state.items() if k.rpartition(".")[0].rpartition(".")[2] in WRAPPED
         and k.endswith(".weight") and np.ndim(v) == 2 and len(set(np.shape(v))) == 1),
        "a layout-dependent weight",
    )  # fmt: skip
    if len(readings) > 1 and c.get("architecture") is None:
        raise FlatformerError(
            f"cannot import: {square} is square and the config names no architecture, so the "
            "bridge's layout is unknown; save the config as `bridge.cfg.to_dict()` writes it, "
            'or add "architecture": "TransformerLensNative" (TransformerLens\'s own model) or '
            'the Hugging Face class the bridge wraps (e.g. "GPT2LMHeadModel")'
        )
    source = tl_source.bridge_forward(c, state, SOURCE_FIELDS)
    if callable(source):
        (conv1d, cfg, tensors, changes), how = agreeing(readings, source, c.get("architecture"))
    elif len(readings) == 1:
        (conv1d, cfg, tensors, changes), how = readings[0], "the only one its shapes allow"
    else:
        raise FlatformerError(
            f"cannot import: {square} is square, so a bridge may store it as nn.Linear's "
            f"(out, in) or as GPT-2's Conv1D (in, out), and {source}; save "
            "`bridge.get_params()` (one layout) instead of `state_dict()`, or import where "
            "TransformerLens is installed"
        )
    parts = {"o": "the attention output", "in": "the MLP's input", "out": "the MLP's output"}
    if conv1d:
        layout = f"Conv1D's (in, out) for {', '.join(parts[p] for p in conv1d)}, else nn.Linear's"
    else:
        layout = "nn.Linear's (out, in) throughout"
    changes.append(f"bridge layout {layout}: {how}")
    provenance = {"format": "transformer-lens-bridge", "changes": changes}
    provenance["layout"] = {"conv1d": list(conv1d), "decided_by": how}
    return Imported(cfg, tensors, None, provenance)


def agreeing(readings: list, source, architecture) -> tuple:
    """The reading whose logits are the bridge's on a probe batch, set well apart from the
    next best (a wrong layout moves logits by far more than rounding does)."""
    cfg = readings[0][1]
    probe = np.random.default_rng(0).integers(0, cfg.d_vocab, (2, min(cfg.n_ctx, 16)))
    expected = source(probe)
    scale = max(1.0, float(np.abs(expected).max()))
    f32 = all(t.dtype == np.float32 for t in readings[0][2].values())
    tol = (1e-4 if f32 else 1e-8) * scale
    errors = []
    for reading in readings:
        model = Transformer(reading[1], {k: v.astype(np.float64) for k, v in reading[2].items()})
        errors.append(float(np.abs(model(probe) - expected).max()))
    order = np.argsort(errors)
    best = errors[order[0]]
    runner_up = errors[order[1]] if len(order) > 1 else np.inf
    bridge = f"TransformerLens's bridge ({architecture or 'TransformerLensNative'})"
    if best > tol or runner_up < 100 * max(best, 1e-300):
        raise FlatformerError(
            f"cannot import: no reading of the bridge's weights reproduces the logits of "
            f"{bridge} (closest off by {best:.2g}); its config may not describe these weights"
        )
    return readings[order[0]], f"its logits are those of {bridge} to {best:.1e}"


def same(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in a)


def assemble(c: dict, t: dict, H: int) -> tuple[ModelConfig, dict, list[str]]:
    """The engine's config and tensors from HookedTransformer-named tensors `t`, with what was
    changed on the way (biases filled in, LNPre's unit gains)."""
    d, dh, L, T, V = (int(c[k]) for k in ("d_model", "d_head", "n_layers", "n_ctx", "d_vocab"))
    if "embed.W_E" not in t:
        raise FlatformerError("TransformerLens state dict has no embed.W_E (nor embed.weight)")
    changes, dtype = [], t["embed.W_E"].dtype
    norm = c.get("normalization_type", c.get("normalization", "LN"))
    arch = architecture(c, dh)
    attn_only = bool(c.get("attn_only", False))
    ln_names = [f"blocks.{i}.ln{j}" for i in range(L) for j in ((1,) if attn_only else (1, 2))]
    if norm == "LNPre":
        for name in ln_names + ["ln_final"]:
            t[name + ".w"], t[name + ".b"] = np.ones(d, dtype), np.zeros(d, dtype)
        changes.append("normalization_type LNPre: LayerNorm with unit gains and zero biases")
    if norm == "LNPre" and c.get("act_fn") == "solu_ln" and not attn_only:
        for i in range(L):
            t[f"blocks.{i}.mlp.ln.w"], t[f"blocks.{i}.mlp.ln.b"] = (
                np.ones(d_mlp_of(t, d), dtype),
                np.zeros(d_mlp_of(t, d), dtype),
            )
    if norm == "RMSPre":
        for name in ln_names + ["ln_final"]:
            t[name + ".w"] = np.ones(d, dtype)
        changes.append("normalization_type RMSPre: RMSNorm with unit gains")
    if c.get("layer_norm_folding") or c.get("fold_ln"):
        changes.append("LayerNorm folded by TransformerLens: weights imported as stored")
    if "unembed.W_U" not in t and c.get("tie_word_embeddings"):
        t["unembed.W_U"] = t["embed.W_E"].T
        changes.append("unembed absent (tie_word_embeddings): embed.W_E copied")
    d_mlp = 0 if attn_only else t.get("blocks.0.mlp.W_in", np.zeros((d, 0))).shape[1]
    if not attn_only and c.get("d_mlp") not in (None, d_mlp):
        raise FlatformerError(f"TransformerLens config: d_mlp {c['d_mlp']}, W_in has {d_mlp}")
    V_out = int(c.get("d_vocab_out", -1))
    V_out = V if V_out <= 0 else V_out
    Hkv = arch.get("n_key_value_heads", H)
    biases = {
        f"blocks.{i}.attn.b_{w}": (H if w in "QO" else Hkv, dh) for i in range(L) for w in "QKVO"
    }
    biases["unembed.b_U"] = (V_out,)
    if arch.get("gated_mlp") and not attn_only:
        biases.update({f"blocks.{i}.mlp.b_in": (d_mlp,) for i in range(L)})
        biases.update({f"blocks.{i}.mlp.b_out": (d,) for i in range(L)})
    absent = [name for name in biases if name not in t]
    for name in absent:
        t[name] = np.zeros(d if name.endswith("b_O") else biases[name], dtype)
    if absent:
        changes.append(f"{len(absent)} absent biases ({absent[0]}, ...): zeros filled in")
    cfg = ModelConfig(
        d_model=d,
        n_heads=H,
        d_head=dh,
        n_layers=L,
        d_mlp=d_mlp,
        n_ctx=T,
        d_vocab=V,
        act_fn="relu" if attn_only else ACT_FNS[c.get("act_fn", "relu")],  # unused if attn-only
        normalization="none" if norm is None else "pre_rms" if norm in RMS else "pre_ln",
        qkv_bias=True,
        attn_out=True,
        attn_out_bias=True,
        unembed_bias=True,
        ln_final=norm is not None,
        d_vocab_out=0 if V_out == V else V_out,
        causal=c.get("attention_dir", "causal") == "causal",  # "bidirectional": tracr's models
        **arch,
    )
    if cfg.grouped:  # TransformerLens's names for grouped keys and values, as the engine's
        for i in range(L):
            for w in "KV":
                for kind in "Wb":
                    t[f"blocks.{i}.attn._{kind}_{w}"] = t.pop(f"blocks.{i}.attn.{kind}_{w}")
    shapes = cfg.param_shapes()
    extra = sorted(set(t) - set(shapes))
    if extra:
        raise FlatformerError(f"TransformerLens state dict: tensor {extra[0]!r} is not in its cfg")
    for name, shape in shapes.items():
        if name not in t:
            raise FlatformerError(f"TransformerLens state dict is missing tensor {name}")
        if t[name].shape != shape:
            raise FlatformerError(
                f"TransformerLens tensor {name} has shape {t[name].shape}, the cfg says {shape}"
            )
    return cfg, {k: np.ascontiguousarray(t[k]) for k in shapes}, changes
