"""nanoGPT's `ckpt.pt` (Karpathy's train.py): `model_args` and a `model` state dict.

nanoGPT's GPT is a pre-LayerNorm GPT-2 with the exact GELU (`nn.GELU()`), LayerNorm eps 1e-5,
`nn.Linear` weights stored (out, in), Q, K and V fused in `attn.c_attn`, the unembedding
`lm_head` tied to `wte`, and with `bias=False` no biases anywhere (not even LayerNorm's). A
model saved after `torch.compile` prefixes every name with `_orig_mod.`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import ModelConfig
from ..errors import FlatformerError
from . import validate
from .common import Imported, as_array, sha256, torch_state

PREFIX = "_orig_mod."
# nanoGPT's model_args by the engine's size names.
SIZE_FIELDS = {
    "d_model": "n_embd",
    "n_heads": "n_head",
    "n_layers": "n_layer",
    "d_vocab": "vocab_size",
    "n_ctx": "block_size",
}
LABELS = {"nanogpt": "nanoGPT checkpoint", "hf-gpt2": "GPT-2 weights"}


def read(path: Path) -> Imported:
    path = Path(path)
    checkpoint = torch_state(path)
    if (
        not isinstance(checkpoint, dict)
        or "model_args" not in checkpoint
        or "model" not in checkpoint
    ):
        raise FlatformerError(
            f"{path}: not a nanoGPT checkpoint (no model_args and model); "
            "a TransformerLens state dict needs --config cfg.json"
        )
    args = checkpoint["model_args"]
    if not isinstance(args, dict):
        raise FlatformerError(f"{path}: model_args is a {type(args).__name__}, not a mapping")
    raw = validate.state_dict(checkpoint["model"], f"{path}: model")
    state = {(k[len(PREFIX) :] if k.startswith(PREFIX) else k): v for k, v in raw.items()}
    sizes = validate.sizes(args, SIZE_FIELDS, f"{path}: model_args")
    bias = validate.flag(f"{path}: model_args", "bias", args.get("bias", True))
    return convert(sizes, bias, state, source=path)


def source_shapes(d: int, L: int, V: int, T: int, m: int, bias: bool) -> dict[str, tuple]:
    """Every tensor the conversion reads, by nanoGPT's name, in nn.Linear's (out, in) layout."""
    shapes = {"transformer.wte.weight": (V, d), "transformer.wpe.weight": (T, d)}
    for i in range(L):
        h = f"transformer.h.{i}."
        parts = {
            "ln_1": (d,), "ln_2": (d,), "attn.c_attn": (3 * d, d), "attn.c_proj": (d, d),
            "mlp.c_fc": (m, d), "mlp.c_proj": (d, m),
        }  # fmt: skip
        for part, weight in parts.items():
            shapes[h + part + ".weight"] = weight
            if bias:
                shapes[h + part + ".bias"] = (weight[0],)
    shapes["transformer.ln_f.weight"] = (d,)
    if bias:
        shapes["transformer.ln_f.bias"] = (d,)
    return shapes


def convert(
    sizes: dict,
    bias: bool,
    state: dict,
    source: Path | None = None,
    act_fn: str = "gelu_erf",
    fmt: str = "nanogpt",
) -> Imported:
    """nanoGPT's checked sizes (`validate.sizes` of SIZE_FIELDS) and state dict (no prefix) as
    flatformer's config and tensors (GPT-2's too, its Conv1D weights transposed to Linear's
    layout, with its tanh GELU). Every tensor read is checked against the sizes first."""
    label = LABELS[fmt]
    d, H, L = sizes["d_model"], sizes["n_heads"], sizes["n_layers"]
    V, T = sizes["d_vocab"], sizes["n_ctx"]
    dh = validate.divides(label, "n_head", H, "n_embd", d)
    fc = "transformer.h.0.mlp.c_fc.weight"
    if fc not in state or np.ndim(state[fc]) != 2:
        raise FlatformerError(f"{label}: {fc} is missing or not a matrix")
    m = int(np.shape(state[fc])[0])
    cfg = ModelConfig(
        d_model=d,
        n_heads=H,
        d_head=dh,
        n_layers=L,
        d_mlp=m,
        n_ctx=T,
        d_vocab=V,
        act_fn=act_fn,
        normalization="pre_ln",
        qkv_bias=bias,
        attn_out=True,
        attn_out_bias=bias,
        unembed_bias=False,
        ln_final=True,
    )
    shapes = source_shapes(d, L, V, T, m, bias)
    if "lm_head.weight" in state:
        shapes["lm_head.weight"] = (V, d)
    for name, shape in shapes.items():
        if name not in state:
            raise FlatformerError(f"{label} is missing tensor {name}")
        validate.shape(name, state[name], shape, label)

    def get(name):
        return as_array(state[name], name)

    filled, changes = [], []

    def bias_of(name, size):
        if bias:
            return get(name)
        filled.append(name)
        return np.zeros(size, get("transformer.wte.weight").dtype)

    t = {
        "embed.W_E": get("transformer.wte.weight"),
        "pos_embed.W_pos": get("transformer.wpe.weight"),
    }
    for i in range(L):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        for ln, ours in (("ln_1", "ln1"), ("ln_2", "ln2")):
            t[b + ours + ".w"] = get(h + ln + ".weight")
            t[b + ours + ".b"] = bias_of(h + ln + ".bias", d)
        W = get(h + "attn.c_attn.weight")  # (3d, d): out, in
        for j, w in enumerate("QKV"):
            t[b + f"attn.W_{w}"] = W[j * d : (j + 1) * d].T.reshape(d, H, dh).transpose(1, 0, 2)
        if bias:
            bqkv = get(h + "attn.c_attn.bias")
            for j, w in enumerate("QKV"):
                t[b + f"attn.b_{w}"] = bqkv[j * d : (j + 1) * d].reshape(H, dh)
            t[b + "attn.b_O"] = get(h + "attn.c_proj.bias")
        t[b + "attn.W_O"] = get(h + "attn.c_proj.weight").T.reshape(H, dh, d)
        t[b + "mlp.W_in"] = get(h + "mlp.c_fc.weight").T
        t[b + "mlp.b_in"] = bias_of(h + "mlp.c_fc.bias", m)
        t[b + "mlp.W_out"] = get(h + "mlp.c_proj.weight").T
        t[b + "mlp.b_out"] = bias_of(h + "mlp.c_proj.bias", d)
    t["ln_final.w"] = get("transformer.ln_f.weight")
    t["ln_final.b"] = bias_of("transformer.ln_f.bias", d)
    if "lm_head.weight" in state:
        t["unembed.W_U"] = get("lm_head.weight").T
        if np.array_equal(t["unembed.W_U"].T, t["embed.W_E"]):
            changes.append("lm_head.weight is tied to transformer.wte.weight: copied")
    else:
        t["unembed.W_U"] = t["embed.W_E"].T
        changes.append("lm_head.weight absent (tied): transformer.wte.weight copied")
    t = {k: np.ascontiguousarray(v) for k, v in t.items()}
    if filled:
        changes.append(f"bias=False: {len(filled)} zero biases filled in")
    provenance = {"format": fmt, "changes": changes}
    if source is not None:
        provenance.update(source=str(source), sha256=sha256(source))
    return Imported(cfg, t, None, provenance)
