"""A Hugging Face GPT-2 folder: config.json with model.safetensors (read without torch) or
pytorch_model.bin (torch.load(weights_only=True)).

GPT-2 is nanoGPT's architecture with the tanh GELU ("gelu_new", flatformer's "gelu") and
`Conv1D` weights stored (in, out), the transpose of `nn.Linear`'s; they are transposed and the
rest is nanoGPT's conversion. The folder's own tokenizer comes along (`tokenizer.read_folder`).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import FlatformerError
from ..store.read import read_json
from . import nanogpt, validate
from .common import Imported, check_ln_eps, refuse, sha256, torch_state
from .tokenizer import read_folder

MAX_JSON_BYTES = 1 << 20  # a GPT-2 config.json is about 1 kB
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


# transformers' ACT2FN names as the engine's: "gelu" is the exact erf GELU, "gelu_new" and
# "gelu_pytorch_tanh" the tanh approximation.
ACT_FNS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_erf", "relu": "relu"}


def read(folder: Path) -> Imported:
    folder = Path(folder)
    config = read_json(folder / "config.json", "Hugging Face config", MAX_JSON_BYTES)
    if not isinstance(config, dict):
        raise FlatformerError(f"{folder}/config.json is not an object")
    model_type = config.get("model_type", "gpt2")
    if model_type != "gpt2":  # Llama, Mistral, Qwen2, Gemma, GPT-NeoX
        from . import hf_modern

        if model_type not in hf_modern.MODEL_TYPES:
            known = ", ".join(("gpt2", *hf_modern.MODEL_TYPES))
            refuse("model_type", model_type, f"the folders read are {known}")
        imported = hf_modern.read(folder, config, *load_state(folder))
        imported.tokenizer = read_folder(folder)
        return imported
    act = config.get("activation_function", "gelu_new")
    if act not in ACT_FNS:
        refuse("activation_function", act, f"the engine's activations are {', '.join(ACT_FNS)}")
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
    source, state = load_state(folder)
    state = {
        (k if k.startswith(("transformer.", "lm_head.")) else "transformer." + k): v
        for k, v in state.items()
    }
    for k in list(state):
        if k.endswith(CONV1D) and k.startswith("transformer.h.") and state[k].ndim == 2:
            state[k] = state[k].T
    m = config.get("n_inner") or 4 * sizes["d_model"]
    imported = nanogpt.convert(sizes, True, state, act_fn=ACT_FNS[act], fmt="hf-gpt2")
    if imported.cfg.d_mlp != m:
        raise FlatformerError(f"{folder}: n_inner {m} but mlp.c_fc has {imported.cfg.d_mlp}")
    imported.provenance.update(source=str(source), sha256=sha256(source))
    imported.tokenizer = read_folder(folder)
    return imported


def load_state(folder: Path) -> tuple[Path, dict]:
    """The folder's weights file and its tensors, model.safetensors read without torch."""
    if (folder / "model.safetensors").exists():
        source = folder / "model.safetensors"
        return source, validate.read_safetensors(source)
    if (folder / "pytorch_model.bin").exists():
        source = folder / "pytorch_model.bin"
        return source, validate.state_dict(torch_state(source), str(source))
    raise FlatformerError(f"{folder}: neither model.safetensors nor pytorch_model.bin")
