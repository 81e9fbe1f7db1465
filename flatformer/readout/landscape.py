"""The last block's output network as a map from the residual stream to next-token logits, and
that map over a grid of the plane (the paper's output landscape)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FlatformerError
from ..engine.components import (
    gated_mlp,
    layer_norm,
    layer_norm_frozen,
    mlp,
    rms_norm,
    rms_norm_frozen,
    solu_mlp,
)
from ..model.transformer import Transformer
from .plane import grid
from .probs import entropy, softmax


class NotApplicable(FlatformerError):
    """A view this model does not have, with why: the commands name it as skipped and go on."""


class NotInPlane(NotApplicable):
    """A view that only makes sense when the residual stream is the plane (d_model == 2)."""


def final_norm(model: Transformer, resid: np.ndarray) -> np.ndarray:
    """The stream as the unembedding reads it: through the final LayerNorm (or RMSNorm) when
    the model has one (its scale computed from `resid` itself), else unchanged."""
    resid = np.asarray(resid, dtype=np.float64)
    if not model.cfg.ln_final:
        return resid
    return norm(model, resid, "ln_final")


def norm(model: Transformer, x: np.ndarray, name: str) -> np.ndarray:
    """The model's own normalisation `name` (ln_final, blocks.L.ln2) on vectors (..., d):
    the engine's LayerNorm or RMSNorm with the model's eps, so that what is read off here
    equals the model's numbers."""
    cfg, t, x = model.cfg, model.tensors, np.asarray(x, dtype=np.float64)
    if cfg.norm_kind == "rms":
        return rms_norm(x, t[name + ".w"], cfg.eps)[0]
    return layer_norm(x, t[name + ".w"], t[name + ".b"], cfg.eps)[0]


def frozen_norm(cfg, x: np.ndarray, w: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """A normalisation with its scale frozen and without its bias: the engine's LayerNorm
    ((x - mean x) / scale w) or RMSNorm (x / scale w), linear in x, so that a sum of terms is
    normalised term by term (the bias then a term of its own)."""
    if cfg.norm_kind == "rms":
        return rms_norm_frozen(x, w, scale)
    return layer_norm_frozen(x, w, 0.0, scale)


def unembed(model: Transformer, resid: np.ndarray) -> np.ndarray:
    """Logits (..., V) for residual-stream vectors (..., d): final_norm(resid) @ W_U (+ b_U)."""
    t = model.tensors
    logits = final_norm(model, resid) @ t["unembed.W_U"]
    if model.cfg.unembed_bias:
        logits = logits + t["unembed.b_U"]
    return logits


def require_output_network(model: Transformer, what: str):
    """Refuse (NotApplicable) a model whose last block's MLP does not read the stream after
    attention: a parallel block's reads the block's input, so its output is no function of z."""
    if model.cfg.parallel_attn_mlp and not model.cfg.attn_only:
        raise NotApplicable(
            f"{what} needs the MLP to read the stream after attention; this model's blocks "
            "run attention and the MLP in parallel on the block's input"
        )


def ffn(model: Transformer, x: np.ndarray, layer: int) -> np.ndarray:
    """Block `layer`'s MLP on its input x (..., d) -> (..., d): the engine's MLP of the model's
    kind (plain, gated, or SoLU with its LayerNorm)."""
    cfg, t, b = model.cfg, model.tensors, f"blocks.{layer}.mlp."
    ends = (t[b + "W_in"], t[b + "b_in"])
    out = (t[b + "W_out"], t[b + "b_out"])
    if cfg.gated_mlp:
        return gated_mlp(x, t[b + "W_gate"], *ends, *out, cfg.act_fn)[0]
    if cfg.act_fn == "solu_ln":
        return solu_mlp(x, *ends, t[b + "ln.w"], t[b + "ln.b"], *out, cfg.eps)[0]
    return mlp(x, *ends, *out, cfg.act_fn)[0]


def output_logits(model: Transformer, points: np.ndarray) -> np.ndarray:
    """The last block's output network at residual points z (..., d): logits (..., V) of
    h = z + FFN(norm2(z)) (h = z for attention-only blocks), read out by the unembedding. For a
    one-block model z is the `blocks.0.hook_resid_mid` of a position, and this equals the
    model's logits there. A parallel block has no such network (NotApplicable)."""
    cfg = model.cfg
    require_output_network(model, "the output landscape")
    layer = cfg.n_layers - 1
    z = np.asarray(points, dtype=np.float64)
    if cfg.attn_only:
        return unembed(model, z)
    x = norm(model, z, f"blocks.{layer}.ln2") if cfg.pre_norm else z
    return unembed(model, z + ffn(model, x, layer))


@dataclass
class Landscape:
    """The output network over a grid of the plane: what the model predicts from each point."""

    xs: np.ndarray  # (G,)
    ys: np.ndarray  # (G,)
    probs: np.ndarray  # (G, G, V), probs[i, j] at (xs[j], ys[i])
    argmax: np.ndarray  # (G, G) int
    entropy: np.ndarray  # (G, G) nats

    @property
    def extent(self) -> tuple[float, float, float, float]:
        """(left, right, bottom, top) of the grid, as matplotlib's imshow takes it."""
        return (self.xs[0], self.xs[-1], self.ys[0], self.ys[-1])

    def at(self, points: np.ndarray) -> np.ndarray:
        """Nearest-grid-cell argmax at 2-D points (..., 2), for labelling points by their zone."""
        p = np.asarray(points)
        j = np.clip(
            np.rint((p[..., 0] - self.xs[0]) / (self.xs[1] - self.xs[0])), 0, len(self.xs) - 1
        ).astype(int)
        i = np.clip(
            np.rint((p[..., 1] - self.ys[0]) / (self.ys[1] - self.ys[0])), 0, len(self.ys) - 1
        ).astype(int)
        return self.argmax[i, j]


def require_plane(model: Transformer, what: str):
    if model.cfg.d_model != 2:
        raise NotInPlane(
            f"{what} needs d_model == 2 (this model has {model.cfg.d_model}): "
            f"only then is the output map a function of the plane"
        )


def landscape(model: Transformer, limits, resolution: int = 200) -> Landscape:
    """`output_logits` over a resolution x resolution grid of the residual plane (d_model == 2
    only; raises NotInPlane otherwise)."""
    require_plane(model, "the output landscape")
    xs, ys, pts = grid(limits, resolution)
    probs = softmax(output_logits(model, pts))
    return Landscape(xs, ys, probs, probs.argmax(-1), entropy(probs))
