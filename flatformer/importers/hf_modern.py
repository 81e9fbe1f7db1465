"""Hugging Face folders of the field's newer small models: Llama (`LlamaForCausalLM`, and
Mistral's, which is Llama's without a sliding window), Qwen2, Gemma and GPT-NeoX (Pythia),
as `save_pretrained` writes them: config.json with model.safetensors or pytorch_model.bin.

Each maps to the engine's components by what the folder holds: RMSNorm (Gemma's gain is
1 + weight), rotary positions (halves, with GPT-NeoX's partial `partial_rotary_factor`),
SwiGLU or GeGLU (gate_proj, up_proj, down_proj as W_gate, W_in, W_out), grouped-query
attention (k_proj and v_proj with num_key_value_heads heads), and GPT-NeoX's parallel
attention and MLP with its fused, per-head interleaved query_key_value. Biases are read where
the file has them (Qwen2's q, k and v; GPT-NeoX's all) and zero where it has none. Anything
that changes the forward pass and that the engine does not compute (a scaled or extended
rope_type, a sliding window, MLP biases inside the gate, another attention scale) is refused
by its field, in one line.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..config import LIMITS, ModelConfig, attn_weight
from ..errors import FlatformerError
from ..store.limits import number
from . import validate
from .common import Imported, refuse, sha256

MODEL_TYPES = ("llama", "mistral", "qwen2", "gemma", "gpt_neox", "gpt_neo")
# transformers' ACT2FN names as the engine's
ACT_FNS = {
    "silu": "silu",
    "swish": "silu",
    "gelu_pytorch_tanh": "gelu",
    "gelu_new": "gelu",
    "gelu": "gelu_erf",
    "relu": "relu",
}


def read(folder: Path, config: dict, source: Path, state: dict) -> Imported:
    """The model of a Hugging Face folder whose config.json names one of MODEL_TYPES, from its
    weights file `source` and the tensors read from it."""
    folder = Path(folder)
    where = f"{folder}/config.json"
    kind = config["model_type"]
    if kind not in MODEL_TYPES:
        refuse("model_type", kind, f"the folders read are {', '.join(('gpt2', *MODEL_TYPES))}")
    if kind == "gpt_neox":
        imported = gpt_neox(config, state, where)
    elif kind == "gpt_neo":
        imported = gpt_neo(config, state, where)
    else:
        imported = llama(config, state, where, kind)
    imported.provenance.update(format=f"hf-{kind.replace('_', '-')}", source=str(source))
    imported.provenance["sha256"] = sha256(source)
    return imported


def rope(config: dict, where: str) -> tuple[float, float]:
    """(theta, the fraction of each head rotated) from transformers 5's `rope_parameters` or
    the older `rope_theta`, `rope_scaling`, `rotary_emb_base` and `rotary_pct`; a rope_type
    other than the plain one changes the angles and is refused."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise FlatformerError(f"{where}: rope_parameters must be an object, got {params!r:.40}")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        refuse("rope_type", rope_type, "rotary angles scaled or extended")
    theta = params.get("rope_theta", config.get("rope_theta", config.get("rotary_emb_base")))
    fraction = params.get(
        "partial_rotary_factor", config.get("partial_rotary_factor", config.get("rotary_pct", 1.0))
    )
    theta = number(f"{where}: " + "rope_theta", 10000.0 if theta is None else theta, 1.0, 1e9)
    fraction = number(f"{where}: " + "partial_rotary_factor", fraction, 0.0, 1.0)
    return theta, fraction


def context(config: dict, where: str, changes: list) -> int:
    """n_ctx from max_position_embeddings: rotary models have no position table, so a longer
    context than the engine's limit is only cut to it (and the cut is named)."""
    value = config.get("max_position_embeddings", 2048)
    top = LIMITS["n_ctx"][1]
    if isinstance(value, int) and not isinstance(value, bool) and value > top:
        changes.append(f"max_position_embeddings {value}: the context is cut to {top}")
        return top
    return validate.size(where, "max_position_embeddings", value, "n_ctx")


def activation(config: dict, field: str, kind: str) -> str:
    act = config.get(field) or ("gelu_pytorch_tanh" if kind == "gemma" else "silu")
    if kind == "gemma" and act == "gelu":  # Gemma's config reads its legacy "gelu" as tanh's
        act = "gelu_pytorch_tanh"
    if act not in ACT_FNS:
        refuse(field, act, f"the engine's activations are {', '.join(ACT_FNS)}")
    return ACT_FNS[act]


class Reader:
    """The folder's tensors by name, each checked for its shape before it is converted."""

    def __init__(self, state: dict, where: str):
        self.state, self.where = state, where

    def has(self, name: str) -> bool:
        return name in self.state

    def __call__(self, name: str, shape: tuple) -> np.ndarray:
        if name not in self.state:
            raise FlatformerError(f"{self.where}: the weights lack tensor {name}")
        validate.shape(name, self.state[name], shape, self.where)
        return validate.array(self.state[name], name)


def llama(config: dict, state: dict, where: str, kind: str) -> Imported:
    """Llama, Mistral, Qwen2 and Gemma: model.embed_tokens, model.layers.i.{input_layernorm,
    self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm,
    lm_head (or tied to the embedding)."""
    changes: list[str] = []
    sizes = validate.sizes(
        config,
        {
            "d_model": "hidden_size",
            "n_layers": "num_hidden_layers",
            "n_heads": "num_attention_heads",
            "d_mlp": "intermediate_size",
            "d_vocab": "vocab_size",
        },
        where,
    )
    d, H, L = sizes["d_model"], sizes["n_heads"], sizes["n_layers"]
    dh = config.get("head_dim") or validate.divides(
        where, "num_attention_heads", H, "hidden_size", d
    )
    dh = validate.size(where, "head_dim", dh, "d_head")
    Hkv = validate.size(
        where, "num_key_value_heads", config.get("num_key_value_heads") or H, "n_heads"
    )
    for field, neutral in (("mlp_bias", False), ("use_sliding_window", False)):
        if config.get(field, neutral) is not neutral:
            what = "biases inside the gated MLP" if field == "mlp_bias" else "local attention"
            refuse(field, config[field], what)
    if kind == "mistral" and config.get("sliding_window") not in (None, 0):
        window = config["sliding_window"]
        n_ctx = context(config, where, [])
        if not isinstance(window, int) or window < n_ctx:
            refuse("sliding_window", window, "local attention")
    types = config.get("layer_types") or []
    if any(t != "full_attention" for t in types):
        refuse("layer_types", sorted(set(types)), "local attention in some layers")
    if kind == "gemma":
        scalar = config.get("query_pre_attn_scalar", dh)
        if scalar != dh:
            refuse(
                "query_pre_attn_scalar", scalar, f"attention scaled otherwise than by 1/sqrt({dh})"
            )
    theta, fraction = rope(config, where)
    act = activation(config, "hidden_act" if "hidden_act" in config else "hidden_activation", kind)
    eps = number(f"{where}: " + "rms_norm_eps", config.get("rms_norm_eps", 1e-6), 1e-12, 0.1)
    n_ctx = context(config, where, changes)
    get = Reader(state, where)
    m, V = sizes["d_mlp"], sizes["d_vocab"]
    p = "model.layers."
    qkv_bias = get.has(p + "0.self_attn.q_proj.bias")
    out_bias = get.has(p + "0.self_attn.o_proj.bias")
    rotary_dim = int(dh * fraction)
    cfg = ModelConfig(
        d_model=d,
        n_heads=H,
        d_head=dh,
        n_layers=L,
        d_mlp=m,
        n_ctx=n_ctx,
        d_vocab=V,
        act_fn=act,
        normalization="pre_rms",
        qkv_bias=qkv_bias,
        attn_out=True,
        attn_out_bias=out_bias,
        unembed_bias=False,
        ln_final=True,
        eps=float(eps),
        positional_embedding_type="rotary",
        rotary_dim=0 if rotary_dim == dh else rotary_dim,
        rotary_base=float(theta),
        gated_mlp=True,
        n_key_value_heads=0 if Hkv == H else Hkv,
    )
    validate.params(where, cfg.n_params)
    # Gemma's RMSNorm scales by 1 + weight, and its embedding by sqrt(d_model) in the model's dtype
    gain = (lambda w: 1.0 + w) if kind == "gemma" else (lambda w: w)
    W_E = get("model.embed_tokens.weight", (V, d))
    t = {"embed.W_E": W_E}
    if kind == "gemma":
        t["embed.W_E"] = W_E * W_E.dtype.type(math.sqrt(d))
        changes.append("Gemma's embedding scale sqrt(d_model) folded into W_E")
    for i in range(L):
        h, b = f"{p}{i}.", f"blocks.{i}."
        t[b + "ln1.w"] = gain(get(h + "input_layernorm.weight", (d,)))
        for w, proj, heads in (("Q", "q_proj", H), ("K", "k_proj", Hkv), ("V", "v_proj", Hkv)):
            name = b + attn_weight(cfg, w)
            W = get(h + f"self_attn.{proj}.weight", (heads * dh, d))  # (out, in)
            t[name] = W.T.reshape(d, heads, dh).transpose(1, 0, 2)
            if qkv_bias:
                t[b + attn_weight(cfg, w, "b")] = get(
                    h + f"self_attn.{proj}.bias", (heads * dh,)
                ).reshape(heads, dh)
        t[b + "attn.W_O"] = get(h + "self_attn.o_proj.weight", (d, H * dh)).T.reshape(H, dh, d)
        if out_bias:
            t[b + "attn.b_O"] = get(h + "self_attn.o_proj.bias", (d,))
        t[b + "ln2.w"] = gain(get(h + "post_attention_layernorm.weight", (d,)))
        t[b + "mlp.W_gate"] = get(h + "mlp.gate_proj.weight", (m, d)).T
        t[b + "mlp.W_in"] = get(h + "mlp.up_proj.weight", (m, d)).T
        t[b + "mlp.b_in"] = np.zeros(m, W_E.dtype)
        t[b + "mlp.W_out"] = get(h + "mlp.down_proj.weight", (d, m)).T
        t[b + "mlp.b_out"] = np.zeros(d, W_E.dtype)
    t["ln_final.w"] = gain(get("model.norm.weight", (d,)))
    t["unembed.W_U"] = unembedding(get, "lm_head.weight", W_E, changes)
    changes.append("the MLP has no biases: b_in and b_out are zeros")
    return finish(cfg, t, changes)


def gpt_neox(config: dict, state: dict, where: str) -> Imported:
    """GPT-NeoX (Pythia): gpt_neox.embed_in, gpt_neox.layers.i.{input_layernorm,
    attention.{query_key_value, dense}, post_attention_layernorm, mlp.{dense_h_to_4h,
    dense_4h_to_h}}, gpt_neox.final_layer_norm, embed_out. query_key_value's rows are per
    head: q, k and v of head 0, then of head 1, ..."""
    changes: list[str] = []
    sizes = validate.sizes(
        config,
        {
            "d_model": "hidden_size",
            "n_layers": "num_hidden_layers",
            "n_heads": "num_attention_heads",
            "d_mlp": "intermediate_size",
            "d_vocab": "vocab_size",
        },
        where,
    )
    d, H, L, m, V = (sizes[k] for k in ("d_model", "n_heads", "n_layers", "d_mlp", "d_vocab"))
    dh = validate.divides(where, "num_attention_heads", H, "hidden_size", d)
    theta, fraction = rope(config, where)
    rotary_dim = int(dh * fraction)
    if rotary_dim < 2 or rotary_dim % 2:
        refuse("partial_rotary_factor", fraction, f"{rotary_dim} of {dh} dimensions rotated")
    act = activation(config, "hidden_act", "gpt_neox")
    eps = number(f"{where}: " + "layer_norm_eps", config.get("layer_norm_eps", 1e-5), 1e-12, 0.1)
    parallel = config.get("use_parallel_residual", True)
    validate.flag(where, "use_parallel_residual", parallel)
    get = Reader(state, where)
    p = "gpt_neox.layers."
    bias = get.has(p + "0.attention.query_key_value.bias")
    cfg = ModelConfig(
        d_model=d,
        n_heads=H,
        d_head=dh,
        n_layers=L,
        d_mlp=m,
        n_ctx=context(config, where, changes),
        d_vocab=V,
        act_fn=act,
        normalization="pre_ln",
        qkv_bias=True,
        attn_out=True,
        attn_out_bias=True,
        unembed_bias=False,
        ln_final=True,
        eps=float(eps),
        positional_embedding_type="rotary",
        rotary_dim=0 if rotary_dim == dh else rotary_dim,
        rotary_base=float(theta),
        parallel_attn_mlp=parallel,
    )
    validate.params(where, cfg.n_params)
    W_E = get("gpt_neox.embed_in.weight", (V, d))
    zeros = []

    def bias_of(name, size):
        if bias:
            return get(name, (size,))
        zeros.append(name)
        return np.zeros(size, W_E.dtype)

    t = {"embed.W_E": W_E}
    for i in range(L):
        h, b = f"{p}{i}.", f"blocks.{i}."
        for ln, ours in (("input_layernorm", "ln1"), ("post_attention_layernorm", "ln2")):
            t[b + ours + ".w"] = get(h + ln + ".weight", (d,))
            t[b + ours + ".b"] = get(h + ln + ".bias", (d,))
        W = get(h + "attention.query_key_value.weight", (3 * d, d)).T.reshape(d, H, 3, dh)
        bqkv = bias_of(h + "attention.query_key_value.bias", 3 * d).reshape(H, 3, dh)
        for j, w in enumerate("QKV"):
            t[b + f"attn.W_{w}"] = W[:, :, j].transpose(1, 0, 2)
            t[b + f"attn.b_{w}"] = bqkv[:, j]
        t[b + "attn.W_O"] = get(h + "attention.dense.weight", (d, d)).T.reshape(H, dh, d)
        t[b + "attn.b_O"] = bias_of(h + "attention.dense.bias", d)
        t[b + "mlp.W_in"] = get(h + "mlp.dense_h_to_4h.weight", (m, d)).T
        t[b + "mlp.b_in"] = get(h + "mlp.dense_h_to_4h.bias", (m,))
        t[b + "mlp.W_out"] = get(h + "mlp.dense_4h_to_h.weight", (d, m)).T
        t[b + "mlp.b_out"] = get(h + "mlp.dense_4h_to_h.bias", (d,))
    t["ln_final.w"] = get("gpt_neox.final_layer_norm.weight", (d,))
    t["ln_final.b"] = get("gpt_neox.final_layer_norm.bias", (d,))
    t["unembed.W_U"] = unembedding(get, "embed_out.weight", W_E, changes)
    if zeros:
        changes.append(f"attention_bias=False: {len(zeros)} zero biases filled in")
    return finish(cfg, t, changes)


def gpt_neo(config: dict, state: dict, where: str) -> Imported:
    """GPT-Neo (TinyStories' models): GPT-2's block with nn.Linear weights, separate q, k and
    v without biases, global and local layers (`attention_types`, `window_size`), and scores
    not divided by sqrt(d_head): that factor is folded into W_Q, so the engine's scaled scores
    are the source's (hook_q is the source's q times sqrt(d_head), and the change is named)."""
    changes: list[str] = []
    sizes = validate.sizes(
        config,
        {
            "d_model": "hidden_size",
            "n_layers": "num_layers",
            "n_heads": "num_heads",
            "n_ctx": "max_position_embeddings",
            "d_vocab": "vocab_size",
        },
        where,
    )
    d, H, L, T, V = (sizes[k] for k in ("d_model", "n_heads", "n_layers", "n_ctx", "d_vocab"))
    dh = validate.divides(where, "num_heads", H, "hidden_size", d)
    m = validate.size(where, "intermediate_size", config.get("intermediate_size") or 4 * d, "d_mlp")
    act = config.get("activation_function", "gelu_new")
    if act not in ACT_FNS:
        refuse("activation_function", act, f"the engine's activations are {', '.join(ACT_FNS)}")
    layers = config.get("attention_layers")
    if layers is None:  # attention_types as [[["global", "local"], n], ...]
        try:
            layers = [t for kinds, n in config["attention_types"] for _ in range(n) for t in kinds]
        except (KeyError, TypeError, ValueError):
            raise FlatformerError(
                f"{where}: attention_types is not [[kinds, repeats], ...]"
            ) from None
    eps = number(f"{where}: layer_norm_epsilon", config.get("layer_norm_epsilon", 1e-5), 1e-12, 0.1)
    local = "local" in layers
    cfg = ModelConfig(
        d_model=d,
        n_heads=H,
        d_head=dh,
        n_layers=L,
        d_mlp=m,
        n_ctx=T,
        d_vocab=V,
        act_fn=ACT_FNS[act],
        normalization="pre_ln",
        attn_out=True,
        attn_out_bias=True,
        unembed_bias=False,
        ln_final=True,
        eps=float(eps),
        attn_types=tuple(layers) if local else (),
        window_size=config.get("window_size", 256) if local else 0,
    )
    validate.params(where, cfg.n_params)
    get = Reader(state, where)
    W_E = get("transformer.wte.weight", (V, d))
    t = {"embed.W_E": W_E, "pos_embed.W_pos": get("transformer.wpe.weight", (T, d))}
    unscaled = W_E.dtype.type(math.sqrt(dh))
    for i in range(L):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        for ln, ours in (("ln_1", "ln1"), ("ln_2", "ln2")):
            t[b + ours + ".w"] = get(h + ln + ".weight", (d,))
            t[b + ours + ".b"] = get(h + ln + ".bias", (d,))
        for w in "qkv":
            W = get(h + f"attn.attention.{w}_proj.weight", (d, d)).T.reshape(d, H, dh)
            t[b + f"attn.W_{w.upper()}"] = W.transpose(1, 0, 2) * (unscaled if w == "q" else 1)
        t[b + "attn.W_O"] = get(h + "attn.attention.out_proj.weight", (d, d)).T.reshape(H, dh, d)
        t[b + "attn.b_O"] = get(h + "attn.attention.out_proj.bias", (d,))
        t[b + "mlp.W_in"] = get(h + "mlp.c_fc.weight", (m, d)).T
        t[b + "mlp.b_in"] = get(h + "mlp.c_fc.bias", (m,))
        t[b + "mlp.W_out"] = get(h + "mlp.c_proj.weight", (d, m)).T
        t[b + "mlp.b_out"] = get(h + "mlp.c_proj.bias", (d,))
    t["ln_final.w"] = get("transformer.ln_f.weight", (d,))
    t["ln_final.b"] = get("transformer.ln_f.bias", (d,))
    t["unembed.W_U"] = unembedding(get, "lm_head.weight", W_E, changes)
    changes.append(
        f"scores not scaled by GPT-Neo: sqrt(d_head) = {math.sqrt(dh):g} folded into W_Q"
    )
    return finish(cfg, t, changes)


def unembedding(get: Reader, name: str, W_E: np.ndarray, changes: list) -> np.ndarray:
    """W_U (d, V): the output head's weight transposed, or the embedding's when it is tied
    (a tied head is saved once, as the embedding)."""
    V, d = W_E.shape
    if get.has(name):
        return get(name, (V, d)).T
    changes.append(f"{name} absent (tied): the embedding copied")
    return W_E.T


def finish(cfg: ModelConfig, t: dict, changes: list) -> Imported:
    tensors = {k: np.ascontiguousarray(v) for k, v in t.items()}
    return Imported(cfg, tensors, None, {"changes": changes, "architecture": cfg.newer_features()})
