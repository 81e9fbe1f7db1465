"""The symmetry the comparison relies on, and the fit that undoes it: an orthogonal map R of the
residual stream (rows x -> x R) with every reader and writer compensating leaves a model without
LayerNorm computing the same function (`rotate_tensors`); orthogonal Procrustes finds the R that
best maps one seed's points onto another's (`procrustes`). See the package's docstring for
which tensors turn and why q and k need a map of their own."""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig, attn_weight
from ..errors import FlatformerError


def procrustes(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The orthogonal R (reflections allowed) minimising |A R - B| for each seed.

    A (S, N, d) points of S seeds, B (N, d) the reference points. Returns R (S, d, d) and the
    relative residual |A R - B| / |B| (S,): 0 when a seed is exactly an orthogonal image.
    """
    M = np.einsum("snd,ne->sde", A, B)
    U, _, Vt = np.linalg.svd(M)
    R = U @ Vt
    gap = np.linalg.norm((A @ R - B).reshape(len(A), -1), axis=1)
    return R, gap / max(float(np.linalg.norm(B)), 1e-300)


def rotate_tensors(
    cfg: ModelConfig, tensors: dict[str, np.ndarray], R: np.ndarray
) -> dict[str, np.ndarray]:
    """The same model with its residual stream mapped by the orthogonal R (x -> x R).

    The function (every logit) is unchanged; q, k and the attention pattern too. Only defined
    when the map is a symmetry: no LayerNorm, and either W_O or a single head (without W_O the
    head's value is written straight into the stream, so it must turn with it).
    """
    if cfg.normalization != "none":
        raise FlatformerError(
            "a rotation of the residual stream is no symmetry of a model with LayerNorm"
        )
    if not cfg.attn_out and cfg.n_heads != 1:
        raise FlatformerError(
            "without W_O, several heads write into fixed slices of the "
            "stream: a general rotation is no symmetry"
        )
    t = {name: np.array(value) for name, value in tensors.items()}
    t["embed.W_E"] = t["embed.W_E"] @ R
    if "pos_embed.W_pos" in t:  # rotary positions have none
        t["pos_embed.W_pos"] = t["pos_embed.W_pos"] @ R
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        for w in "QKV":
            name = b + attn_weight(cfg, w)  # grouped keys and values: attn._W_K, attn._W_V
            t[name] = np.einsum("ed,hef->hdf", R, t[name])  # R^T W
        if cfg.attn_out:
            t[b + "attn.W_O"] = t[b + "attn.W_O"] @ R
        else:
            t[b + "attn.W_V"] = t[b + "attn.W_V"] @ R
            if cfg.qkv_bias:
                t[b + "attn.b_V"] = t[b + "attn.b_V"] @ R
        if not cfg.attn_only:
            if cfg.gated_mlp:
                t[b + "mlp.W_gate"] = R.T @ t[b + "mlp.W_gate"]
            t[b + "mlp.W_in"] = R.T @ t[b + "mlp.W_in"]
            t[b + "mlp.W_out"] = t[b + "mlp.W_out"] @ R
            t[b + "mlp.b_out"] = t[b + "mlp.b_out"] @ R
    t["unembed.W_U"] = R.T @ t["unembed.W_U"]
    return t
