"""Every token at every position: the V x T combined points e_vt = x_v + p_t, their queries, keys
and values, and what each head writes into the residual stream.

In block 0 these depend only on the token and its position, so one forward pass over the batch
whose row v repeats token v covers all V x T combinations, and the numbers are read from the
engine's own hooks (LayerNorm and biases included exactly as it applies them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import ModelConfig
from ..transformer import Transformer
from .plane import Field, Plane, fit_plane, grid


def all_points_tokens(V: int, T: int) -> np.ndarray:
    """(V, T) batch whose row v is token v at every position: at block 0 each position of each row
    is one combined point, so one forward pass gives every point's Q, K and V."""
    return np.repeat(np.arange(V)[:, None], T, axis=1)


def all_points(model: Transformer) -> dict[str, np.ndarray]:
    """The named activations of the all-points batch (hook names, leading axes (V, T))."""
    return model.run_with_cache(all_points_tokens(model.cfg.d_vocab, model.cfg.n_ctx))[1]


def combined_points(model: Transformer) -> np.ndarray:
    """e = x + p for every token at every position: (V, T, d)."""
    cache = all_points(model)
    return cache["hook_embed"] + cache["hook_pos_embed"]


def write_heads(cfg: ModelConfig, v: np.ndarray, W_O: np.ndarray | None) -> np.ndarray:
    """(..., H, dh) per-head vectors -> (..., H, d): each head's contribution to hook_attn_out,
    through W_O (H, dh, d), or, in a model without W_O, into the head's own d_head slice (heads
    are concatenated head-major)."""
    if cfg.attn_out:
        return np.einsum("...hi,hid->...hd", v, W_O)
    H, dh = cfg.n_heads, cfg.d_head
    out = np.zeros((*v.shape[:-2], H, cfg.d_model))
    for h in range(H):
        out[..., h, h * dh : (h + 1) * dh] = v[..., h, :]
    return out


def head_outputs(model: Transformer, v: np.ndarray, layer: int = 0) -> np.ndarray:
    """(..., H, dh) per-head vectors of `layer` -> (..., H, d) (see `write_heads`)."""
    W_O = model.tensors[f"blocks.{layer}.attn.W_O"] if model.cfg.attn_out else None
    return write_heads(model.cfg, v, W_O)


def point_label(token: str, position: int) -> str:
    """A combined point's label: the token followed by its position, e.g. "+5"."""
    return f"{token}{position}"


@dataclass
class Embeddings:
    """Token x_v (V, d), position p_t (T, d) and combined e_vt = x_v + p_t (V, T, d) vectors."""

    vocab: list[str]
    token: np.ndarray
    position: np.ndarray
    combined: np.ndarray
    labels: np.ndarray  # (V, T) str, e.g. labels[11, 5] == "+5"
    plane: Plane  # drawing plane of the combined points
    token_plane: Plane
    position_plane: Plane

    @property
    def combined_2d(self) -> np.ndarray:
        return self.plane.project(self.combined)

    @property
    def token_2d(self) -> np.ndarray:
        return self.token_plane.project(self.token)

    @property
    def position_2d(self) -> np.ndarray:
        return self.position_plane.project(self.position)


def embeddings(model: Transformer, vocab: list[str], plane: Plane | None = None) -> Embeddings:
    """Every token, position and token + position point of the model's embedding space.

    The combined points come from `hook_embed + hook_pos_embed` of the all-points batch, so they
    are exactly the residual stream the engine starts from. `plane` fixes the drawing plane (e.g.
    one plane for all frames of a movie).
    """
    V, T = model.cfg.d_vocab, model.cfg.n_ctx
    cache = all_points(model)
    combined = cache["hook_embed"] + cache["hook_pos_embed"]  # (V, T, d)
    labels = np.array(
        [[point_label(vocab[v], t) for t in range(T)] for v in range(V)], dtype=object
    )
    token, position = cache["hook_embed"][:, 0], cache["hook_pos_embed"][0]
    return Embeddings(
        list(vocab),
        token,
        position,
        combined,
        labels,
        plane or fit_plane(combined),
        fit_plane(token),
        fit_plane(position),
    )


@dataclass
class Projections:
    """Query, key and value of every combined point at block `layer` (0), per head."""

    q: np.ndarray  # (V, T, H, dh)
    k: np.ndarray  # (V, T, H, dh)
    v: np.ndarray  # (V, T, H, dh)
    written: np.ndarray  # (V, T, H, d) what head h adds to the residual when it attends
    #   only to this key (v_h in its slot, or v_h @ W_O[h])
    d_head: int

    def plane(self, which: str, head: int = 0) -> Plane:
        """Drawing plane of one head's query, key or value space (identity when d_head == 2)."""
        return fit_plane(getattr(self, which)[:, :, head])

    def qk_plane(self, head: int = 0) -> Plane:
        """One plane for a head's queries and keys together (the joint Q/K space)."""
        return fit_plane(np.concatenate([self.q[:, :, head], self.k[:, :, head]]))


def projections(model: Transformer) -> Projections:
    """Q, K, V of all V x T combined points, read from block 0's hook_q/k/v."""
    cache = all_points(model)
    q, k, v = (cache[f"blocks.0.attn.hook_{n}"] for n in "qkv")
    return Projections(q, k, v, head_outputs(model, v, layer=0), model.cfg.d_head)


def point_scores(proj: Projections, head: int = 0) -> np.ndarray:
    """Pre-softmax scores q_(a,t) . k_(b,s) / sqrt(dh) between every query point (a, t) and key
    point (b, s): (V, T, V, T), NaN where the causal mask hides the key (s > t)."""
    q, k = proj.q[:, :, head], proj.k[:, :, head]
    scores = np.einsum("ati,bsi->atbs", q, k) / math.sqrt(proj.d_head)
    T = q.shape[1]
    hidden = np.arange(T)[None, :] > np.arange(T)[:, None]  # (t, s)
    return np.where(hidden[None, :, None, :], np.nan, scores)


def qk_field(query: np.ndarray, plane: Plane, limits, resolution: int = 120) -> Field:
    """q . k / sqrt(dh) for every key k on the plane grid: the background of the focus figures.

    `query` is (dh,); `plane` the drawing plane of the key space (grid points are lifted back to
    dh-dim keys, so for dh > 2 the field is the slice through the plane).
    """
    xs, ys, pts = grid(limits, resolution)
    keys = plane.lift(pts)  # (G, G, dh)
    return Field(xs, ys, keys @ np.asarray(query) / math.sqrt(len(query)))
