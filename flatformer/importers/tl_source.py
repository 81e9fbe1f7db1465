"""TransformerLens's own forward pass for a `TransformerBridge` state dict: the oracle a bridge
import is decided and checked against.

A bridge's state dict names every weight the same whatever model the bridge wraps, but stores
each in that model's layout: TransformerLens's native model keeps `nn.Linear`'s (out, in), a
Hugging Face GPT-2 keeps `Conv1D`'s (in, out) for the attention output and the MLP (its query,
key and value are split out of `c_attn` as `nn.Linear`). Where a weight is square (`W_O`
whenever n_heads * d_head == d_model) the two look alike, so the importer rebuilds the bridge
the config names, loads the state dict into it and keeps the reading whose logits are its.

Only the fields the importer reads are passed on (sizes, activation, normalisation and the
features `tlens.NEUTRAL` holds at their neutral values); every other field leaves the forward
pass as it is, by the importer's own rules.
"""

from __future__ import annotations

import os
import tempfile
from typing import Callable

import numpy as np

NATIVE = (None, "TransformerLensNative")
HF_GPT2 = ("GPT2LMHeadModel",)

Forward = Callable[[np.ndarray], np.ndarray]


def bridge_forward(c: dict, state: dict, fields: set[str]) -> Forward | str:
    """A function from token ids (B, T) to the bridge's logits (B, T, V) as float64, with
    `state` loaded; or, where it cannot be built here, the reason as a phrase."""
    arch = c.get("architecture")
    if arch not in NATIVE + HF_GPT2:
        return f"flatformer cannot rebuild a bridge around {arch!r} to check against"
    try:
        import torch
        from transformer_lens.model_bridge import TransformerBridge  # noqa: F401
    except ImportError:
        return "TransformerLens is not installed (pip install 'flatformer[lens]')"
    tensors = {k: torch.as_tensor(np.asarray(v)) for k, v in state.items()}
    dtype = torch.float32 if all(t.dtype == torch.float32 for t in tensors.values()) else None
    dtype = dtype or torch.float64
    tensors = {k: t.to(dtype) if t.is_floating_point() else t for k, t in tensors.items()}
    sizes = {k: c[k] for k in fields if k in c}
    try:
        bridge = native(sizes, dtype) if arch in NATIVE else hf_gpt2(sizes, dtype)
        missing, unexpected = bridge.load_state_dict(tensors, strict=False)
    except Exception as exc:  # TransformerLens refuses these sizes or tensors
        return f"TransformerLens could not build it ({first_line(exc)})"
    if unexpected or missing:
        name = (unexpected or missing)[0]
        return f"the bridge's own state dict {'has no' if unexpected else 'needs'} {name!r}"
    bridge.eval()

    def forward(tokens: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return bridge(torch.as_tensor(tokens, dtype=torch.long)).double().numpy()

    return forward


def native(sizes: dict, dtype):
    """TransformerLens's native model (its `TransformerBridge.boot_native`)."""
    from transformer_lens.model_bridge.sources.native import boot

    return boot(
        {**sizes, "architecture": "TransformerLensNative", "init_weights": False}, dtype=dtype
    )


def hf_gpt2(sizes: dict, dtype):
    """A Hugging Face `GPT2LMHeadModel` of these sizes inside `TransformerBridge`, built offline
    from a config written to a temporary folder (`boot_transformers` reads its config there)."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import GPT2Config, GPT2LMHeadModel

    hf = GPT2Config(
        vocab_size=sizes["d_vocab"],
        n_positions=sizes["n_ctx"],
        n_embd=sizes["d_model"],
        n_layer=sizes["n_layers"],
        n_head=sizes["n_heads"],
        n_inner=sizes.get("d_mlp"),
        activation_function=sizes.get("act_fn", "gelu_new"),
        layer_norm_epsilon=sizes.get("eps", 1e-5),
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=False,  # both matrices are in the state dict, each loaded as stored
    )
    model = GPT2LMHeadModel(hf).to(dtype).eval()
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        saved = os.environ.get("HF_HUB_OFFLINE")
        os.environ["HF_HUB_OFFLINE"] = "1"  # the folder is all there is to read
        try:
            return TransformerBridge.boot_transformers(folder, hf_model=model, dtype=dtype)
        finally:
            if saved is None:
                del os.environ["HF_HUB_OFFLINE"]
            else:
                os.environ["HF_HUB_OFFLINE"] = saved


def first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
