"""The last block's output network as a map from the residual stream to next-token logits, and
that map over a grid of the plane (the paper's output landscape)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FlatformerError
from ..engine.components import layer_norm, mlp
from ..model.transformer import Transformer
from .plane import grid
from .probs import entropy, softmax


class NotInPlane(FlatformerError):
    """A view that only makes sense when the residual stream is the plane (d_model == 2)."""


def final_norm(model: Transformer, resid: np.ndarray) -> np.ndarray:
    """The stream as the unembedding reads it: through the final LayerNorm when the model has
    one (its scale computed from `resid` itself), else unchanged."""
    resid = np.asarray(resid, dtype=np.float64)
    if not model.cfg.ln_final:
        return resid
    return norm(resid, model.tensors["ln_final.w"], model.tensors["ln_final.b"])


def norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The model's own LayerNorm on vectors (..., d), so that what is read off here equals the
    model's numbers to the last bit."""
    return layer_norm(np.asarray(x, dtype=np.float64), w, b)[0]


def unembed(model: Transformer, resid: np.ndarray) -> np.ndarray:
    """Logits (..., V) for residual-stream vectors (..., d): final_norm(resid) @ W_U (+ b_U)."""
    t = model.tensors
    logits = final_norm(model, resid) @ t["unembed.W_U"]
    if model.cfg.unembed_bias:
        logits = logits + t["unembed.b_U"]
    return logits


def output_logits(model: Transformer, points: np.ndarray) -> np.ndarray:
    """The last block's output network at residual points z (..., d): logits (..., V) of
    h = z + FFN(LN2(z)) (h = z for attention-only blocks), read out by the unembedding. For a
    one-block model z is the `blocks.0.hook_resid_mid` of a position, and this equals the
    model's logits there."""
    cfg, t = model.cfg, model.tensors
    b = f"blocks.{cfg.n_layers - 1}."
    z = np.asarray(points, dtype=np.float64)
    if cfg.attn_only:
        return unembed(model, z)
    x = z
    if cfg.normalization == "pre_ln":
        x = norm(z, t[b + "ln2.w"], t[b + "ln2.b"])
    weights = (t[b + "mlp.W_in"], t[b + "mlp.b_in"], t[b + "mlp.W_out"], t[b + "mlp.b_out"])
    return unembed(model, z + mlp(x, *weights, cfg.act_fn)[0])


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
