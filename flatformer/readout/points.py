"""Every token at every position: the V x T combined points e_vt = x_v + p_t, their queries, keys
and values, and what each head writes into the residual stream.

In block 0 these depend only on the token and its position, so one forward pass over the batch
whose row v repeats token v covers all V x T combinations, and the numbers are read from the
engine's own hooks (LayerNorm and biases included exactly as it applies them).

The newer architectures are read as the model computes them: with rotary positions the queries
and keys are the turned ones (`hook_rot_q`, `hook_rot_k`) and positions add nothing to the
stream (p = 0), as with shortformer positions, which enter only q and k's inputs; grouped keys
and values are shown for every query head, each head reading its group's.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..config import ModelConfig, attn_weight
from ..store.resources import PASS_BYTES, rows_per_pass  # noqa: F401  (readout names them too)
from ..engine.components import repeat_kv
from ..model.transformer import Transformer
from .plane import Field, Plane, fit_plane, grid


# The point views (the figures, and the page's token+position clouds) draw every token at every position while there are at most MAX_POINTS of
# them (the paper's 12 x 8, a modular-addition model's 114 x 3); past that a cloud of thousands
# of labelled points is neither readable nor cheap (their labels cost time and memory), so they
# show the MAX_TOKENS most frequent tokens at MAX_POSITIONS evenly spaced positions.
MAX_POINTS = 512
MAX_TOKENS = 12
MAX_POSITIONS = 8


@dataclass
class Shown:
    """The tokens (vocabulary indices, ascending) and positions (ascending) the point figures
    show, out of the model's `d_vocab` and `n_ctx`, and how the tokens were chosen."""

    tokens: np.ndarray
    positions: np.ndarray
    d_vocab: int
    n_ctx: int
    chosen_by: str = ""

    @property
    def every(self) -> bool:
        return len(self.tokens) == self.d_vocab and len(self.positions) == self.n_ctx

    def local(self, token: int, position: int) -> tuple[int, int]:
        """A (token, position) pair as indices into the shown arrays."""
        return int(np.searchsorted(self.tokens, token)), int(
            np.searchsorted(self.positions, position)
        )

    @property
    def note(self) -> str:
        """What a figure showing these points says about them ("" when it shows every one)."""
        if self.every:
            return ""
        tokens = (
            "every token"
            if len(self.tokens) == self.d_vocab
            else f"{len(self.tokens)} of {self.d_vocab:,} tokens ({self.chosen_by})"
        )
        positions = (
            "every position"
            if len(self.positions) == self.n_ctx
            else f"{len(self.positions)} of {self.n_ctx:,} positions"
        )
        return f"{tokens} at {positions}"


def shown_points(
    d_vocab: int, n_ctx: int, counts: np.ndarray, focus: int, focus_position: int
) -> Shown:
    """Every point while there are at most MAX_POINTS; else the MAX_TOKENS tokens with the
    largest `counts` (their frequency in the held-out text; ties to the lower index) and the
    focus token, at MAX_POSITIONS evenly spaced positions and the focus position."""
    every_token, every_position = np.arange(d_vocab), np.arange(n_ctx)
    if d_vocab * n_ctx <= MAX_POINTS:
        return Shown(every_token, every_position, d_vocab, n_ctx)
    tokens, chosen_by = every_token, ""
    if d_vocab > MAX_TOKENS:
        ranked = np.argsort(-np.asarray(counts, dtype=float), kind="stable")
        top = [t for t in ranked if t != focus][: MAX_TOKENS - 1]
        tokens = np.sort(np.array([focus, *top], dtype=int))
        chosen_by = "the most frequent in the held-out text"
    positions = every_position
    if n_ctx > MAX_POSITIONS:
        spaced = np.linspace(0, n_ctx - 1, MAX_POSITIONS - 1).round().astype(int)
        positions = np.unique(np.append(spaced, focus_position))
    return Shown(tokens, positions, d_vocab, n_ctx, chosen_by)


def default_focus_position(n_ctx: int) -> int:
    """The query position the focus figures use: two thirds into the context, so that some keys
    are visible and some are hidden by the causal mask."""
    return min(n_ctx - 1, (2 * n_ctx) // 3)


def held_out_counts(task, data_seed: int, d_vocab: int) -> np.ndarray:
    """How often each token occurs in the task's held-out sequences for `data_seed`: what
    `shown_points` ranks tokens by."""
    return np.bincount(np.concatenate(task.split(data_seed)[1]), minlength=d_vocab)


def all_points_tokens(V: int, T: int) -> np.ndarray:
    """(V, T) batch whose row v is token v at every position: at block 0 each position of each row
    is one combined point, so one forward pass gives every point's Q, K and V."""
    return np.repeat(np.arange(V)[:, None], T, axis=1)


def all_points(model: Transformer) -> dict[str, np.ndarray]:
    """The named activations of the all-points batch (hook names, leading axes (V, T))."""
    return model.run_with_cache(all_points_tokens(model.cfg.d_vocab, model.cfg.n_ctx))[1]


def qk_hooks(cfg: ModelConfig, layer: int = 0) -> tuple[str, str]:
    """The hooks of the queries and keys attention multiplies: rotated ones with rotary
    positions (hook_rot_q, hook_rot_k), else hook_q and hook_k."""
    b = f"blocks.{layer}.attn.hook_"
    return (b + "rot_q", b + "rot_k") if cfg.rotary else (b + "q", b + "k")


def point_hooks(cfg: ModelConfig) -> tuple[str, ...]:
    """What `embeddings` and `projections` read of the all-points batch."""
    positions = () if cfg.rotary else ("hook_pos_embed",)
    return ("hook_embed", *positions, *qk_hooks(cfg), "blocks.0.attn.hook_v")


def stream_positions(cfg: ModelConfig, cache: dict) -> np.ndarray:
    """p, what positions add to the residual stream: hook_pos_embed, or zeros when positions
    enter only the queries and keys (rotary and shortformer positions)."""
    if cfg.rotary or cfg.shortformer:
        return np.zeros_like(cache["hook_embed"])
    return cache["hook_pos_embed"]


def every_head(cfg: ModelConfig, x: np.ndarray) -> np.ndarray:
    """Keys or values (..., n_kv_heads, dh) for each query head (..., H, dh): each head reads
    its group's (the engine's repeat_kv, whose heads axis is -3)."""
    group = cfg.n_heads // cfg.n_kv_heads
    return repeat_kv(np.swapaxes(x, -2, -3), group).swapaxes(-2, -3)


def head_weight(model: Transformer, letter: str, head: int, layer: int = 0) -> np.ndarray:
    """W_Q, W_K or W_V (`letter`) of query head `head` (d, dh): a grouped model's keys and values
    are its group's."""
    cfg = model.cfg
    kv = head // (cfg.n_heads // cfg.n_kv_heads) if letter in "KV" else head
    return model.tensors[f"blocks.{layer}." + attn_weight(cfg, letter)][kv]


def some_points(model: Transformer, tokens, positions) -> dict[str, np.ndarray]:
    """point_hooks of the all-points batch restricted to `tokens` x `positions` (leading axes
    (len(tokens), len(positions))). The rows run a few at a time (`rows_per_pass`) and keep
    only these hooks at these positions: the whole batch of a large model (its logits alone
    are V x T x V) need never exist."""
    tokens, positions = np.asarray(tokens, dtype=int), np.asarray(positions, dtype=int)
    width = int(positions.max()) + 1  # causal: later positions change nothing before them
    model = first_block(model)  # every hook read comes before block 0's attention
    step = rows_per_pass(model.cfg, width)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in point_hooks(model.cfg)}
    for start in range(0, len(tokens), step):
        rows = np.repeat(tokens[start : start + step, None], width, axis=1)
        cache = model.run_with_cache(rows)[1]
        for name in parts:
            parts[name].append(cache[name][:, positions])
    return {name: np.concatenate(arrays) for name, arrays in parts.items()}


def first_block(model: Transformer) -> Transformer:
    """The model cut after block 0 (its embeddings, block 0 and the unembedding): the same
    numbers up to block 0's output, without the later blocks' passes (most of a large
    model's forward pass)."""
    if model.cfg.n_layers == 1:
        return model
    keep = {
        name: w
        for name, w in model.tensors.items()
        if not name.startswith("blocks.") or name.startswith("blocks.0.")
    }
    cfg = dataclasses.replace(model.cfg, n_layers=1, attn_types=tuple(model.cfg.attn_types[:1]))
    return Transformer(cfg, keep)


def _points(model: Transformer, tokens, positions) -> dict[str, np.ndarray]:
    """The all-points activations, of every point or of `tokens` x `positions`."""
    if tokens is None and positions is None:
        return all_points(model)
    every_token, every_position = np.arange(model.cfg.d_vocab), np.arange(model.cfg.n_ctx)
    return some_points(
        model,
        every_token if tokens is None else tokens,
        every_position if positions is None else positions,
    )


def combined_points(model: Transformer) -> np.ndarray:
    """e = x + p for every token at every position: (V, T, d)."""
    cache = all_points(model)
    return cache["hook_embed"] + stream_positions(model.cfg, cache)


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


def embeddings(
    model: Transformer,
    vocab: list[str],
    plane: Plane | None = None,
    tokens=None,
    positions=None,
) -> Embeddings:
    """Every token, position and token + position point of the model's embedding space, or
    those of `tokens` (vocabulary indices) at `positions` (then `vocab` and every array follow
    that choice, in its order).

    The combined points come from `hook_embed + hook_pos_embed` of the all-points batch (p = 0
    where positions do not enter the stream), so they are exactly the residual stream the
    engine starts from. `plane` fixes the drawing plane (e.g.
    one plane for all frames of a movie).
    """
    cache = _points(model, tokens, positions)
    p = stream_positions(model.cfg, cache)
    combined = cache["hook_embed"] + p  # (V, T, d)
    names = list(vocab) if tokens is None else [vocab[t] for t in tokens]
    where = range(model.cfg.n_ctx) if positions is None else positions
    labels = np.array([[point_label(name, int(t)) for t in where] for name in names], dtype=object)
    token, position = cache["hook_embed"][:, 0], p[0]
    return Embeddings(
        names,
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


def projections(model: Transformer, tokens=None, positions=None) -> Projections:
    """Q, K, V of all V x T combined points (or of `tokens` x `positions`), read from block 0's
    hook_q/k/v (hook_rot_q and hook_rot_k with rotary positions; grouped keys and values for
    every query head)."""
    cfg = model.cfg
    cache = _points(model, tokens, positions)
    q_name, k_name = qk_hooks(cfg)
    q, k = cache[q_name], every_head(cfg, cache[k_name])
    v = every_head(cfg, cache["blocks.0.attn.hook_v"])
    return Projections(q, k, v, head_outputs(model, v, layer=0), model.cfg.d_head)


def point_scores(proj: Projections, head: int = 0, positions=None, query=None) -> np.ndarray:
    """Pre-softmax scores q_(a,t) . k_(b,s) / sqrt(dh) between every query point (a, t) and key
    point (b, s): (V, T, V, T), NaN where the causal mask hides the key (s > t). `positions`
    names the position of each point column (0..T-1 by default); `query`, a token index, keeps
    only that token's queries: (T, V, T)."""
    q, k = proj.q[:, :, head], proj.k[:, :, head]
    T = q.shape[1]
    at = np.arange(T) if positions is None else np.asarray(positions)
    hidden = at[None, :] > at[:, None]  # (t, s)
    if query is not None:
        scores = np.einsum("ti,bsi->tbs", q[query], k) / math.sqrt(proj.d_head)
        return np.where(hidden[:, None, :], np.nan, scores)
    scores = np.einsum("ati,bsi->atbs", q, k) / math.sqrt(proj.d_head)
    return np.where(hidden[None, :, None, :], np.nan, scores)


def qk_field(query: np.ndarray, plane: Plane, limits, resolution: int = 120) -> Field:
    """q . k / sqrt(dh) for every key k on the plane grid: the background of the focus figures.

    `query` is (dh,); `plane` the drawing plane of the key space (grid points are lifted back to
    dh-dim keys, so for dh > 2 the field is the slice through the plane).
    """
    xs, ys, pts = grid(limits, resolution)
    keys = plane.lift(pts)  # (G, G, dh)
    return Field(xs, ys, keys @ np.asarray(query) / math.sqrt(len(query)))
