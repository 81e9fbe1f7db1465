"""A Hugging Face GPT-2 folder: config.json with model.safetensors (read without torch) or
pytorch_model.bin (torch.load(weights_only=True)).

GPT-2 is nanoGPT's architecture with the tanh GELU ("gelu_new", flatformer's "gelu") and
`Conv1D` weights stored (in, out), the transpose of `nn.Linear`'s; they are transposed and the
rest is nanoGPT's conversion.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import FlatformerError
from ..tasks.corpus import char_name
from ..limits import read_json
from . import nanogpt, validate
from .common import Imported, check_ln_eps, refuse, sha256, torch_state

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def read(folder: Path) -> Imported:
    folder = Path(folder)
    config = read_json(folder / "config.json", "GPT-2 config", 1_000_000)
    if not isinstance(config, dict):
        raise FlatformerError(f"{folder}/config.json is not an object")
    model_type = config.get("model_type", "gpt2")
    if model_type != "gpt2":
        refuse("model_type", model_type, "only GPT-2's architecture is read from a folder")
    act = config.get("activation_function", "gelu_new")
    if act != "gelu_new":
        refuse("activation_function", act, "only GPT-2's gelu_new is imported")
    where = f"{folder}/config.json"
    check_ln_eps("layer_norm_epsilon", config.get("layer_norm_epsilon", 1e-5), where)
    sizes = validate.sizes(config, nanogpt.SIZE_FIELDS | {"n_ctx": "n_positions"}, where)
    for name, wanted in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("reorder_and_upcast_attn", False),
    ):
        if config.get(name, wanted) != wanted:
            refuse(name, config[name], "attention scaled otherwise than by 1/sqrt(d_head)")
    if (folder / "model.safetensors").exists():
        source = folder / "model.safetensors"
        state = validate.read_safetensors(source)
    elif (folder / "pytorch_model.bin").exists():
        source = folder / "pytorch_model.bin"
        state = validate.state_dict(torch_state(source), str(source))
    else:
        raise FlatformerError(f"{folder}: neither model.safetensors nor pytorch_model.bin")
    state = {
        (k if k.startswith(("transformer.", "lm_head.")) else "transformer." + k): v
        for k, v in state.items()
    }
    for k in list(state):
        if k.endswith(CONV1D) and k.startswith("transformer.h.") and state[k].ndim == 2:
            state[k] = state[k].T
    m = config.get("n_inner") or 4 * sizes["d_model"]
    imported = nanogpt.convert(sizes, True, state, act_fn="gelu", fmt="hf-gpt2")
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
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
        names = {int(i): str(t) for t, i in vocab.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise FlatformerError(f"{path}: no model.vocab mapping tokens to ids") from None
    if sorted(names) != list(range(V)) or len(set(names.values())) != V:
        raise FlatformerError(f"{path}: its vocabulary does not name the model's {V} ids once each")
    shown = ["".join(char_name(c) for c in names[i]) for i in range(V)]
    if "" in shown or len(set(shown)) != V:
        raise FlatformerError(
            f"{path}: an empty token, or two tokens alike once whitespace is shown (␣ ⏎ ⇥)"
        )
    return shown, sum(a != names[i] for i, a in enumerate(shown))
