"""A Hugging Face GPT-2 folder: config.json with model.safetensors (read without torch) or
pytorch_model.bin (torch.load(weights_only=True)).

GPT-2 is nanoGPT's architecture with the tanh GELU ("gelu_new", flatformer's "gelu") and
`Conv1D` weights stored (in, out), the transpose of `nn.Linear`'s; they are transposed and the
rest is nanoGPT's conversion.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import FlatformerError
from ..store.read import read_bytes, read_json
from ..tasks.corpus import char_name
from . import nanogpt
from .common import MAX_SOURCE_BYTES, Imported, check_ln_eps, refuse, sha256, torch_state

MAX_JSON_BYTES = 1 << 20  # a GPT-2 config.json is about 1 kB
MAX_TOKENIZER_BYTES = 64 << 20  # GPT-2's tokenizer.json is 1.4 MB
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def read(folder: Path) -> Imported:
    folder = Path(folder)
    config = read_json(folder / "config.json", "Hugging Face config", MAX_JSON_BYTES)
    if not isinstance(config, dict):
        raise FlatformerError(f"{folder}/config.json is not an object")
    model_type = config.get("model_type", "gpt2")
    if model_type != "gpt2":
        refuse("model_type", model_type, "only GPT-2's architecture is read from a folder")
    act = config.get("activation_function", "gelu_new")
    if act != "gelu_new":
        refuse("activation_function", act, "only GPT-2's gelu_new is imported")
    check_ln_eps("layer_norm_epsilon", config.get("layer_norm_epsilon", 1e-5))
    for name, wanted in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("reorder_and_upcast_attn", False),
    ):
        if config.get(name, wanted) != wanted:
            refuse(name, config[name], "attention scaled otherwise than by 1/sqrt(d_head)")
    if (folder / "model.safetensors").exists():
        source = folder / "model.safetensors"
        state = read_safetensors(source)
    elif (folder / "pytorch_model.bin").exists():
        source = folder / "pytorch_model.bin"
        state = torch_state(source)
    else:
        raise FlatformerError(f"{folder}: neither model.safetensors nor pytorch_model.bin")
    state = {
        (k if k.startswith(("transformer.", "lm_head.")) else "transformer." + k): v
        for k, v in state.items()
    }
    for k in list(state):
        if k.endswith(CONV1D) and k.startswith("transformer.h."):
            state[k] = state[k].T
    try:
        d = int(config["n_embd"])
        m = config.get("n_inner") or 4 * d
        args = {
            "n_embd": d,
            "n_head": config["n_head"],
            "n_layer": config["n_layer"],
            "vocab_size": config["vocab_size"],
            "block_size": config["n_positions"],
            "bias": True,
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise FlatformerError(f"{folder}/config.json lacks a GPT-2 size: {exc}") from None
    imported = nanogpt.convert(args, state, act_fn="gelu", fmt="hf-gpt2")
    if imported.cfg.d_mlp != m:
        raise FlatformerError(f"{folder}: n_inner {m} but mlp.c_fc has {imported.cfg.d_mlp}")
    imported.provenance.update(source=str(source), sha256=sha256(source))
    imported.vocab, renamed = token_names(folder, imported.cfg.d_vocab)
    if renamed:
        imported.provenance["changes"].append(
            f"tokenizer.json: whitespace in {renamed} tokens shown by its visible name (␣ ⏎ ⇥)"
        )
    return imported


def token_names(folder: Path, V: int) -> tuple[list[str] | None, int]:
    """Token strings from tokenizer.json's vocabulary when it names every id 0..V-1 once, and
    how many were renamed.

    Prompts are typed as space-separated tokens, and the page shows every token: whitespace
    inside a token is written by its visible name (a space as ␣), as the char tokenizer does."""
    path = folder / "tokenizer.json"
    if not path.exists():
        return None, 0
    tokenizer = read_json(path, "tokenizer", MAX_TOKENIZER_BYTES)
    try:
        vocab = tokenizer["model"]["vocab"]
        names = {int(i): str(t) for t, i in vocab.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise FlatformerError(f"{path}: no model.vocab mapping tokens to ids") from None
    if sorted(names) != list(range(V)) or len(set(names.values())) != V:
        raise FlatformerError(f"{path}: its vocabulary does not name the model's {V} ids once each")
    shown = ["".join(char_name(c) for c in names[i]) for i in range(V)]
    if "" in shown or len(set(shown)) != V:
        raise FlatformerError(
            f"{path}: an empty token, or two tokens alike once whitespace is shown (␣ ⏎ ⇥)"
        )
    return shown, sum(a != names[i] for i, a in enumerate(shown))


def read_safetensors(path: Path) -> dict:
    """model.safetensors read whole through the store's reader (regular, size-checked)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    try:
        return load(read_bytes(path, "weights", MAX_SOURCE_BYTES))
    except (SafetensorError, ValueError) as exc:
        raise FlatformerError(f"{path}: not a readable safetensors file ({exc})") from None
