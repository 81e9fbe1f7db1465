"""SAELens's on-disk format (SAELens 6: `SAE.save_model` / `SAE.load_from_disk`): a folder
with `cfg.json` (the inference config's `to_dict()`) and `sae_weights.safetensors` holding
`W_enc` (d_in, d_sae), `b_enc` (d_sae,), `W_dec` (d_sae, d_in or d_out), `b_dec`, and
`threshold` (d_sae,) for JumpReLU.

Architectures as SAELens names them: "standard" (ReLU), "topk" (with `k`), "jumprelu", and
"transcoder" (ReLU, with `d_out`; SAELens's transcoders are ReLU only: a TopK or JumpReLU
transcoder is refused here by name). A BatchTopK dictionary is saved as SAELens saves one for
inference: a "jumprelu" with its one threshold in every latent. The hook names go in
`metadata` (`hook_name`, and `hook_name_out` for a transcoder), as SAELens 6 reads them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..engine.components import linear
from ..errors import FlatformerError
from ..importers.validate import read_safetensors
from ..store.read import read_json
from ..store.write import atomic_write, make_folder

CFG, WEIGHTS = "cfg.json", "sae_weights.safetensors"
MAX_CFG_BYTES = 1 << 20  # a SAELens cfg.json is about 2 kB
FORMAT_VERSION = "6.0.0"  # the SAELens release whose cfg.json layout we write
ARCHITECTURES = {
    "relu": "standard",
    "topk": "topk",
    "batchtopk": "jumprelu",
    "jumprelu": "jumprelu",
}


def saelens_cfg(
    kind: str,
    weights: dict,
    hook_name: str,
    hook_name_out: str | None,
    k=None,
    dtype: str = "float32",
    model_name: str = "",
    context_size: int | None = None,
) -> dict:
    """The cfg.json of one dictionary, with SAELens 6's `SAEConfig.to_dict()` keys."""
    d_in, d_sae = weights["W_enc"].shape
    transcoder = hook_name_out is not None and hook_name_out != hook_name
    if transcoder and kind != "relu":
        raise FlatformerError(
            f"SAELens's transcoders are ReLU: a {kind} transcoder has no SAELens architecture"
        )
    cfg = {
        "d_in": int(d_in),
        "d_sae": int(d_sae),
        "dtype": dtype,
        "device": "cpu",
        "apply_b_dec_to_input": not transcoder,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": {
            # SAELens reads a cfg without a version >= 6 as its older flat format
            "sae_lens_version": FORMAT_VERSION,
            "sae_lens_training_version": None,
            "model_name": model_name,
            "hook_name": hook_name,
            "hook_head_index": None,
            "prepend_bos": False,
            "context_size": context_size,
        },
        "architecture": "transcoder" if transcoder else ARCHITECTURES[kind],
    }
    if transcoder:
        cfg["d_out"] = int(weights["W_dec"].shape[1])
        cfg["metadata"]["hook_name_out"] = hook_name_out
    if kind == "topk":
        cfg["k"] = int(k)
        cfg["rescale_acts_by_decoder_norm"] = False
    return cfg


def save_saelens(folder, cfg: dict, weights: dict) -> Path:
    """Write cfg.json and sae_weights.safetensors into `folder` (created), through the store."""
    from safetensors.numpy import save

    folder = make_folder(folder, "dictionary folder")
    dtype = np.dtype(cfg.get("dtype", "float32"))
    tensors = {n: np.ascontiguousarray(np.asarray(v, dtype=dtype)) for n, v in weights.items()}
    atomic_write(folder / WEIGHTS, save(tensors))
    atomic_write(folder / CFG, (json.dumps(cfg, indent=2) + "\n").encode())
    return folder


def load_saelens(folder) -> tuple[dict, dict[str, np.ndarray]]:
    """cfg.json and the weights (float64) of a folder in SAELens's format, with one-line
    errors for a folder that is not one."""
    folder = Path(folder)
    if not (folder / CFG).is_file() or not (folder / WEIGHTS).is_file():
        raise FlatformerError(f"{folder} is not a SAELens folder: it needs {CFG} and {WEIGHTS}")
    cfg = read_json(folder / CFG, "SAELens cfg.json", MAX_CFG_BYTES)
    if not isinstance(cfg, dict):
        raise FlatformerError(f"{folder / CFG}: not an object")
    weights = {n: v.astype(np.float64) for n, v in read_safetensors(folder / WEIGHTS).items()}
    missing = [n for n in ("W_enc", "b_enc", "W_dec", "b_dec") if n not in weights]
    if cfg.get("architecture") == "jumprelu":
        missing += [] if "threshold" in weights else ["threshold"]
    if missing:
        raise FlatformerError(f"{folder / WEIGHTS} has no {missing[0]}")
    d_in, d_sae = weights["W_enc"].shape
    if (cfg.get("d_in"), cfg.get("d_sae")) != (d_in, d_sae):
        raise FlatformerError(
            f"{folder / CFG} says d_in {cfg.get('d_in')}, d_sae {cfg.get('d_sae')}; "
            f"W_enc is {d_in} x {d_sae}"
        )
    return cfg, weights


def run_saelens(cfg: dict, weights: dict, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Latents and output of a SAELens-format dictionary on x (N, d_in), as SAELens's encode
    and decode compute them: f (N, d_sae), x_hat (N, d_out)."""
    arch = cfg["architecture"]
    xc = x - weights["b_dec"] if cfg.get("apply_b_dec_to_input", True) else x
    pre = linear(xc, weights["W_enc"], weights["b_enc"])
    if arch in ("standard", "transcoder"):
        f = np.maximum(pre, 0)
    elif arch == "jumprelu":
        f = pre * (pre > weights["threshold"])
    elif arch == "topk":
        k = int(cfg["k"])
        gate = np.zeros(pre.shape)
        np.put_along_axis(gate, np.argpartition(-pre, k - 1, axis=-1)[:, :k], 1.0, axis=-1)
        f = np.maximum(pre, 0) * gate
    else:
        raise FlatformerError(f"architecture {arch!r} is not one flatformer reads")
    return f, linear(f, weights["W_dec"], weights["b_dec"])
