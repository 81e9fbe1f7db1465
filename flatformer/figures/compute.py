"""The numbers every figure (and every movie frame) draws, computed in one place.

Pure NumPy: each function takes a `Transformer` (or arrays it produced) and returns arrays or a
small dataclass; nothing here draws, prints or saves. Activations are read from
`Transformer.run_with_cache` under their TransformerLens names, so what a figure shows is what the
engine computed. The pieces:

- `Plane`: how a d-dim space is drawn in 2-D: the identity when d == 2 (the paper's point: no
  projection needed), else the first two principal components of the points shown.
- `embeddings`: token, position and combined (token + position) points, all V x T of them.
- `projections`: the query, key and value of every combined point, per head, at block 0.
- `point_scores`, `qk_field`: the pre-softmax Q.K scores between points, and over a plane grid.
- `trace`: every activation of one sequence, per block.
- `output_logits`, `landscape`: the last block's output network (MLP + residual + unembedding)
  as a map from the residual stream to next-token probabilities, and that map over a 2-D grid.
- `generate`, `rule_status`, `next_allowed`: sampled sequences and what the task's rule
  allows at each position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import FlatformerError
from ..model import LN_EPS, activation
from ..tasks.base import Task
from ..transformer import Transformer


class NotInPlane(FlatformerError):
    """A figure that only makes sense when the residual stream is the plane (d_model == 2)."""


# --------------------------------------------------------------------------- planes and limits

@dataclass
class Plane:
    """An affine map from a d-dim space to 2-D drawing coordinates: p = (x - mean) @ axes.T.

    For d == 2 it is the identity and `explained` is None. For d > 2 `axes` are the first two
    principal directions of the fitted points and `explained` their share of the variance. A
    1-dim space is drawn on the x axis.
    """

    mean: np.ndarray                   # (d,)
    axes: np.ndarray                   # (2, d), orthonormal rows (the 2nd is zero when d == 1)
    explained: np.ndarray | None = None  # (2,) fraction of variance along each axis

    @property
    def is_identity(self) -> bool:
        return self.explained is None

    def project(self, x: np.ndarray) -> np.ndarray:
        """(..., d) -> (..., 2)."""
        return (np.asarray(x) - self.mean) @ self.axes.T

    def lift(self, p: np.ndarray) -> np.ndarray:
        """(..., 2) drawing coordinates -> (..., d) points of the space, on the plane."""
        return self.mean + np.asarray(p) @ self.axes

    def axis_labels(self, space: str = "") -> tuple[str, str]:
        """E.g. ("dim 1", "dim 2") for the plane itself, ("PC1 (71%)", "PC2 (18%)") for PCA."""
        prefix = f"{space} " if space else ""
        if self.explained is None:
            if not np.any(self.axes[1]):
                return f"{prefix}dim 1", ""
            return f"{prefix}dim 1", f"{prefix}dim 2"
        return tuple(f"{prefix}PC{i + 1} ({100 * v:.0f}%)" for i, v in enumerate(self.explained))


def fit_plane(points: np.ndarray) -> Plane:
    """The plane to draw `points` (..., d) in: identity for d <= 2, else PCA of the points.

    Principal axes get a deterministic sign (largest-magnitude entry positive) so that planes fitted
    to nearby checkpoints do not flip between movie frames.
    """
    x = np.asarray(points, dtype=np.float64)
    d = x.shape[-1]
    if d == 1:
        return Plane(np.zeros(1), np.array([[1.0], [0.0]]))
    if d == 2:
        return Plane(np.zeros(2), np.eye(2))
    x = x.reshape(-1, d)
    mean = x.mean(0)
    _, s, vt = np.linalg.svd(x - mean, full_matrices=False)
    axes = vt[:2].copy()
    signs = np.sign(axes[np.arange(2), np.abs(axes).argmax(1)])
    axes *= np.where(signs == 0, 1.0, signs)[:, None]
    var = s ** 2
    explained = var[:2] / var.sum() if var.sum() > 0 else np.zeros(2)
    return Plane(mean, axes, explained)


def square_limits(*arrays: np.ndarray, pad: float = 0.08) -> tuple[float, float, float, float]:
    """(x0, x1, y0, y1) covering every 2-D point of `arrays` (each (..., 2)), with equal spans so
    panels drawn with these limits can be compared and keep an aspect ratio of 1."""
    pts = np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1, 2) for a in arrays])
    pts = pts[np.all(np.isfinite(pts), axis=1)]
    if not len(pts):
        return (-1.0, 1.0, -1.0, 1.0)
    lo, hi = pts.min(0), pts.max(0)
    centre, half = (lo + hi) / 2, max((hi - lo).max() / 2, 1e-6) * (1 + pad)
    return (centre[0] - half, centre[0] + half, centre[1] - half, centre[1] + half)


def grid(limits, resolution: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """xs (G,), ys (G,) and points (G, G, 2) with points[i, j] = (xs[j], ys[i]) (image order)."""
    xs = np.linspace(limits[0], limits[1], resolution)
    ys = np.linspace(limits[2], limits[3], resolution)
    gx, gy = np.meshgrid(xs, ys)
    return xs, ys, np.stack([gx, gy], -1)


# --------------------------------------------------------------------------- tokens and points

def focus_token(task: Task) -> int:
    """Index of the token whose query the figures focus on (`task.focus`)."""
    if task.focus not in task.vocab:
        raise FlatformerError(f"task {task.name} declares no focus token in its vocabulary "
                              f"(focus={task.focus!r})")
    return task.vocab.index(task.focus)


def default_focus_position(n_ctx: int) -> int:
    """The query position the focus figures use: two thirds into the context, so that some keys
    are visible and some are hidden by the causal mask."""
    return min(n_ctx - 1, (2 * n_ctx) // 3)


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
    labels: np.ndarray          # (V, T) str, e.g. labels[11, 5] == "+5"
    plane: Plane                # drawing plane of the combined points
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

    The combined points come from `hook_embed + hook_pos_embed` of the all-points batch (token v
    repeated over the whole context), so they are exactly the residual stream the engine starts
    from. `plane` fixes the drawing plane (e.g. one plane for all frames of a movie).
    """
    V, T = model.cfg.d_vocab, model.cfg.n_ctx
    _, cache = model.run_with_cache(all_points_tokens(V, T))
    combined = cache["hook_embed"] + cache["hook_pos_embed"]                    # (V, T, d)
    labels = np.array([[point_label(vocab[v], t) for t in range(T)] for v in range(V)],
                      dtype=object)
    token, position = cache["hook_embed"][:, 0], cache["hook_pos_embed"][0]
    return Embeddings(list(vocab), token, position, combined, labels,
                      plane or fit_plane(combined), fit_plane(token), fit_plane(position))


def all_points_tokens(V: int, T: int) -> np.ndarray:
    """(V, T) batch whose row v is token v at every position: at block 0 each position of each row
    is one combined point, so one forward pass gives every point's Q, K and V."""
    return np.repeat(np.arange(V)[:, None], T, axis=1)


@dataclass
class Projections:
    """Query, key and value of every combined point at block `layer` (0), per head."""

    q: np.ndarray               # (V, T, H, dh)
    k: np.ndarray               # (V, T, H, dh)
    v: np.ndarray               # (V, T, H, dh)
    written: np.ndarray         # (V, T, H, d) what head h adds to the residual when it attends
                                #   only to this key (v_h in its slot, or v_h @ W_O[h])
    d_head: int

    def plane(self, which: str, head: int = 0) -> Plane:
        """Drawing plane of one head's query, key or value space (identity when d_head == 2)."""
        return fit_plane(getattr(self, which)[:, :, head])

    def qk_plane(self, head: int = 0) -> Plane:
        """One plane for a head's queries and keys together (the joint Q/K space)."""
        return fit_plane(np.concatenate([self.q[:, :, head], self.k[:, :, head]]))


def projections(model: Transformer) -> Projections:
    """Q, K, V of all V x T combined points, read from block 0's hook_q/k/v (so LayerNorm and
    biases are included exactly as the engine applies them)."""
    cfg = model.cfg
    _, cache = model.run_with_cache(all_points_tokens(cfg.d_vocab, cfg.n_ctx))
    q, k, v = (cache[f"blocks.0.attn.hook_{n}"] for n in "qkv")
    return Projections(q, k, v, head_outputs(model, v, layer=0), cfg.d_head)


def head_outputs(model: Transformer, v: np.ndarray, layer: int = 0) -> np.ndarray:
    """(..., H, dh) per-head vectors -> (..., H, d): each head's contribution to hook_attn_out."""
    cfg = model.cfg
    H, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
    if cfg.attn_out:
        return np.einsum("...hi,hid->...hd", v, model.tensors[f"blocks.{layer}.attn.W_O"])
    out = np.zeros((*v.shape[:-2], H, d))
    for h in range(H):                 # without W_O heads are concatenated, head-major
        out[..., h, h * dh:(h + 1) * dh] = v[..., h, :]
    return out


def point_scores(proj: Projections, head: int = 0) -> np.ndarray:
    """Pre-softmax scores q_(a,t) . k_(b,s) / sqrt(dh) between every query point (a, t) and key
    point (b, s): (V, T, V, T), NaN where the causal mask hides the key (s > t)."""
    q, k = proj.q[:, :, head], proj.k[:, :, head]
    scores = np.einsum("ati,bsi->atbs", q, k) / math.sqrt(proj.d_head)
    T = q.shape[1]
    hidden = np.arange(T)[None, :] > np.arange(T)[:, None]                      # (t, s)
    return np.where(hidden[None, :, None, :], np.nan, scores)


@dataclass
class Field:
    """A scalar over a plane grid: values[i, j] at (xs[j], ys[i])."""

    xs: np.ndarray
    ys: np.ndarray
    values: np.ndarray

    @property
    def extent(self) -> tuple[float, float, float, float]:
        return (self.xs[0], self.xs[-1], self.ys[0], self.ys[-1])


SLICE_NOTE = "background: the plane's slice of the head space (keys off the plane score otherwise)"


def qk_field(query: np.ndarray, plane: Plane, limits, resolution: int = 120) -> Field:
    """q . k / sqrt(dh) for every key k on the plane grid: the background of the focus figures.

    `query` is (dh,); `plane` the drawing plane of the key space (grid points are lifted back to
    dh-dim keys, so for dh > 2 the field is the slice through the plane).
    """
    xs, ys, pts = grid(limits, resolution)
    keys = plane.lift(pts)                                                     # (G, G, dh)
    return Field(xs, ys, keys @ np.asarray(query) / math.sqrt(len(query)))


# --------------------------------------------------------------------------- one sequence

@dataclass
class BlockTrace:
    """One block's activations for one sequence (TransformerLens shapes without the batch axis)."""

    resid_pre: np.ndarray       # (T, d)
    q: np.ndarray               # (T, H, dh)
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray          # (H, T, T), -inf above the diagonal
    pattern: np.ndarray         # (H, T, T)
    z: np.ndarray               # (T, H, dh) = pattern @ v
    attn_out: np.ndarray        # (T, d)
    resid_mid: np.ndarray       # (T, d) = resid_pre + attn_out
    mlp_out: np.ndarray         # (T, d)
    resid_post: np.ndarray      # (T, d) = resid_mid + mlp_out


@dataclass
class Trace:
    """Every activation of one sequence: e = x + p, then per block z = e + Attn(e),
    h = z + FFN(z), then logits and probabilities."""

    tokens: np.ndarray          # (T,)
    labels: list[str]           # point labels, e.g. ["41", "12", "+2", ...]
    token_text: list[str]
    embed: np.ndarray           # (T, d) x
    pos_embed: np.ndarray       # (T, d) p
    blocks: list[BlockTrace]
    logits: np.ndarray          # (T, V)
    probs: np.ndarray           # (T, V)
    cache: dict = field(repr=False, default_factory=dict)

    @property
    def e(self) -> np.ndarray:
        return self.embed + self.pos_embed


def trace(model: Transformer, tokens, vocab: list[str]) -> Trace:
    """Run one sequence and keep its named activations (raises FlatformerError on bad tokens)."""
    tokens = model.check_tokens(tokens)[0]
    logits, cache = model.run_with_cache(tokens)
    c = {name: act[0] for name, act in cache.items()}
    blocks = []
    for layer in range(model.cfg.n_layers):
        b = f"blocks.{layer}."
        blocks.append(BlockTrace(
            c[b + "hook_resid_pre"], c[b + "attn.hook_q"], c[b + "attn.hook_k"],
            c[b + "attn.hook_v"], c[b + "attn.hook_attn_scores"], c[b + "attn.hook_pattern"],
            c[b + "attn.hook_z"], c[b + "hook_attn_out"], c[b + "hook_resid_mid"],
            c[b + "hook_mlp_out"], c[b + "hook_resid_post"]))
    text = [vocab[t] for t in tokens]
    return Trace(tokens, [point_label(w, i) for i, w in enumerate(text)], text,
                 c["hook_embed"], c["hook_pos_embed"], blocks, logits[0], softmax(logits[0]), c)


# --------------------------------------------------------------------------- output landscape

def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def output_logits(model: Transformer, points: np.ndarray) -> np.ndarray:
    """The last block's output network at residual points z (..., d): logits (..., V) of
    h = z + FFN(LN2(z)), read out by the unembedding. For a one-block model z is the
    `blocks.0.hook_resid_mid` of a position, and this equals the model's logits there."""
    cfg, t = model.cfg, model.tensors
    b = f"blocks.{cfg.n_layers - 1}."
    z = np.asarray(points, dtype=np.float64)
    x = z
    if cfg.normalization == "pre_ln":
        centred = z - z.mean(-1, keepdims=True)
        x = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + LN_EPS)
        x = x * t[b + "ln2.w"] + t[b + "ln2.b"]
    hidden = activation(cfg, x @ t[b + "mlp.W_in"] + t[b + "mlp.b_in"])
    h = z + hidden @ t[b + "mlp.W_out"] + t[b + "mlp.b_out"]
    logits = h @ t["unembed.W_U"]
    if cfg.unembed_bias:
        logits = logits + t["unembed.b_U"]
    return logits


@dataclass
class Landscape:
    """The output network over a grid of the plane: what the model predicts from each point."""

    xs: np.ndarray              # (G,)
    ys: np.ndarray              # (G,)
    probs: np.ndarray           # (G, G, V), probs[i, j] at (xs[j], ys[i])
    argmax: np.ndarray          # (G, G) int
    entropy: np.ndarray         # (G, G) nats

    @property
    def extent(self) -> tuple[float, float, float, float]:
        return (self.xs[0], self.xs[-1], self.ys[0], self.ys[-1])

    def at(self, points: np.ndarray) -> np.ndarray:
        """Nearest-grid-cell argmax at 2-D points (..., 2), for labelling points by their zone."""
        p = np.asarray(points)
        j = np.clip(np.rint((p[..., 0] - self.xs[0]) / (self.xs[1] - self.xs[0])), 0,
                    len(self.xs) - 1).astype(int)
        i = np.clip(np.rint((p[..., 1] - self.ys[0]) / (self.ys[1] - self.ys[0])), 0,
                    len(self.ys) - 1).astype(int)
        return self.argmax[i, j]


def require_plane(model: Transformer, what: str):
    if model.cfg.d_model != 2:
        raise NotInPlane(f"{what} needs d_model == 2 (this model has {model.cfg.d_model}): "
                         f"only then is the output map a function of the plane")


def landscape(model: Transformer, limits, resolution: int = 200) -> Landscape:
    """`output_logits` over a resolution x resolution grid of the residual plane (d_model == 2
    only; raises NotInPlane otherwise)."""
    require_plane(model, "the output landscape")
    xs, ys, pts = grid(limits, resolution)
    probs = softmax(output_logits(model, pts))
    entropy = -(probs * np.log(np.maximum(probs, 1e-300))).sum(-1)
    return Landscape(xs, ys, probs, probs.argmax(-1), entropy)


# --------------------------------------------------------------------------- sequences and rules

def rule_status(task: Task, seq: np.ndarray, n_ctx: int) -> np.ndarray:
    """Per position of `seq`: 1 when its token is one the task's rule allows there, 0 when the
    rule forbids it, -1 when the rule is silent or what decides it lies beyond the `n_ctx`
    tokens a model predicting that position could see."""
    seq = np.asarray(seq)
    mask, source = task.allowed(seq)
    idx = np.arange(len(seq))
    counted = (source >= 0) & (source >= idx - n_ctx)
    return np.where(counted, mask[idx, seq].astype(int), -1)


def next_allowed(task: Task, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the token after each position of `tokens`: the tokens the rule allows (T, V) and
    whether the rule decides it at all (T,). The rule is asked about the sequence extended by
    one (arbitrary) token."""
    mask, source = task.allowed(np.append(np.asarray(tokens), 0))
    return mask[1:], source[1:] >= 0


def generate(model: Transformer, prompts: np.ndarray, length: int, seed: int = 0,
             temperature: float = 1.0) -> np.ndarray:
    """Continue each prompt (B, P) to `length` tokens by sampling, with a sliding context window.

    Sampling (not greedy) shows what the model believes everywhere, including unconstrained
    positions; the seed makes the figure reproducible.
    """
    rng = np.random.default_rng(seed)
    seqs = np.array(prompts, dtype=np.int64)
    T = model.cfg.n_ctx
    while seqs.shape[1] < length:
        logits = model(seqs[:, -T:])[:, -1]
        probs = softmax(logits / max(temperature, 1e-6))
        u = rng.random((len(seqs), 1))
        nxt = np.minimum((probs.cumsum(-1) < u).sum(-1), probs.shape[-1] - 1)
        seqs = np.concatenate([seqs, nxt[:, None]], axis=1)
    return seqs
