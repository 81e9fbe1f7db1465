"""The NumPy transformer: forward pass with named activations, and its hand-written backward pass.

Every parameter carries a leading seed axis S, so many independent models run as one batched
program. All parameters are views into one flat buffer (float64, or float32 when a recipe asks;
tensor-major: each tensor's S copies are contiguous), which makes the optimizer a few vector
operations.

Shapes in comments: S seeds, B sequences, T positions, H heads, d d_model, dh d_head, m d_mlp,
V d_vocab, N = B * T.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .config import GELU_C, LN_EPS, ModelConfig
from .errors import FlatformerError



@lru_cache(maxsize=None)
def keep_freed_memory():
    """Ask glibc to keep freed blocks for reuse instead of handing them back to the OS.

    The engine allocates the same few-hundred-kilobyte activations every step; by default glibc
    maps each afresh and unmaps it when freed, and the page faults of touching new memory cost
    more than the arithmetic (measured at 64 seeds: forward 2.3 -> 0.8 ms, backward 1.6 -> 0.8).
    """
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-1, 256 << 20)   # M_TRIM_THRESHOLD: keep up to 256 MB free at the top
        libc.mallopt(-3, 64 << 20)    # M_MMAP_THRESHOLD: serve blocks below 64 MB from the heap
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune


class Params:
    """Named views of shape (S, *shape) into one flat buffer of S * n_params numbers."""

    def __init__(self, cfg: ModelConfig, n_seeds: int, flat: np.ndarray | None = None,
                 dtype=np.float64):
        self.cfg, self.n_seeds = cfg, n_seeds
        size = n_seeds * cfg.n_params
        self.flat = np.zeros(size, dtype) if flat is None else flat
        if self.flat.shape != (size,):
            raise ValueError(f"flat buffer has {self.flat.size} numbers, expected {size}")
        self.views = {name: self.flat[start:stop].reshape(shape)
                      for name, start, stop, shape in _layout(cfg, n_seeds)}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.views[name]

    def __contains__(self, name: str) -> bool:
        return name in self.views

    def like(self, flat: np.ndarray | None = None) -> "Params":
        """Another Params with the same layout (zeros, or over the given buffer)."""
        return Params(self.cfg, self.n_seeds, np.zeros_like(self.flat) if flat is None else flat)

    def select(self, seeds) -> "Params":
        """A copy holding only the given seeds, in that order."""
        seeds = list(seeds)
        out = Params(self.cfg, len(seeds), dtype=self.flat.dtype)
        for name, view in out.views.items():
            view[...] = self.views[name][seeds]
        return out

    def seed(self, s: int) -> dict[str, np.ndarray]:
        """One seed's tensors, copied out."""
        return {name: view[s].copy() for name, view in self.views.items()}

    def member(self, s: int) -> np.ndarray:
        """One seed's numbers as one vector in the one-seed layout (a new array): how a
        checkpoint holds the optimizer's moments and the explorer the weights."""
        return np.concatenate([view[s].ravel() for view in self.views.values()])

    def members(self) -> np.ndarray:
        """Every seed's `member` at once, one row each: (S, n_params)."""
        return np.concatenate([view.reshape(self.n_seeds, -1) for view in self.views.values()],
                              axis=1)

    @classmethod
    def from_members(cls, cfg: ModelConfig, vectors: list[np.ndarray],
                     dtype=np.float64) -> "Params":
        """Params holding one-seed vectors (as `member` gives them), one seed each."""
        rows = np.stack(vectors).astype(dtype, copy=False)                 # (S, n_params)
        return cls(cfg, len(vectors), np.concatenate(
            [rows[:, start:stop].ravel() for _, start, stop, _ in _layout(cfg, 1)]))

    @classmethod
    def stack(cls, cfg: ModelConfig, tensors: list[dict[str, np.ndarray]]) -> "Params":
        """Params holding the given per-seed tensors, one seed each."""
        params = cls(cfg, len(tensors))
        for name, view in params.views.items():
            for s, t in enumerate(tensors):
                if name not in t:
                    raise FlatformerError(f"checkpoint is missing tensor {name}")
                if t[name].shape != view.shape[1:]:
                    raise FlatformerError(
                        f"checkpoint tensor {name} has shape {t[name].shape}, "
                        f"the config says {view.shape[1:]}")
                view[s] = t[name]
        return params


@lru_cache(maxsize=64)
def _layout(cfg: ModelConfig, n_seeds: int):
    layout, offset = [], 0
    for name, shape in cfg.param_shapes().items():
        n = n_seeds * math.prod(shape)
        layout.append((name, offset, offset + n, (n_seeds, *shape)))
        offset += n
    return tuple(layout)


def init_params(cfg: ModelConfig, rngs: list[np.random.Generator],
                embed_scale: float = 1.0) -> Params:
    """PyTorch's default initialisation, one generator per seed.

    Embeddings are N(0, 1) like nn.Embedding (times `embed_scale`), linear maps and their biases
    uniform in +-1/sqrt(fan_in) like nn.Linear, LayerNorm gains 1 and biases 0.
    """
    params = Params(cfg, len(rngs))
    for s, rng in enumerate(rngs):
        for name, view in params.views.items():
            leaf = name.rsplit(".", 1)[1]
            shape = view.shape[1:]
            if leaf in ("W_E", "W_pos"):
                view[s] = embed_scale * rng.standard_normal(shape)
            elif leaf in ("w", "b"):                       # LayerNorm gain and bias
                view[s] = 1.0 if leaf == "w" else 0.0
            else:
                fan_in = {"W_Q": cfg.d_model, "W_K": cfg.d_model, "W_V": cfg.d_model,
                          "b_Q": cfg.d_model, "b_K": cfg.d_model, "b_V": cfg.d_model,
                          "W_O": cfg.n_heads * cfg.d_head, "W_in": cfg.d_model,
                          "b_in": cfg.d_model, "W_out": cfg.d_mlp, "b_out": cfg.d_mlp,
                          "W_U": cfg.d_model, "b_U": cfg.d_model}[leaf]
                bound = 1.0 / math.sqrt(fan_in)
                view[s] = rng.uniform(-bound, bound, shape)
    return params


@lru_cache(maxsize=None)
def _fused():
    try:
        from . import fused
    except ImportError:   # numba missing: NumPy does it all
        return None
    return fused


def fused_for(*arrays):
    """fused.py, the compiled versions of the elementwise steps below, when these arrays take
    them (all float32 and C-contiguous, numba installed), else None. Imported on first use:
    numba takes 0.3 s to import, which commands that never run float32 need not pay."""
    if all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays):
        return _fused()
    return None


# NumPy reduces a short last axis (8 keys, 12 tokens) one row at a time, with overhead per row;
# a matrix-vector product and a few elementwise maxima do the same work 5-10x faster here.
def row_sum(x: np.ndarray) -> np.ndarray:
    """x.sum(-1, keepdims=True)."""
    n = x.shape[-1]
    return (x.reshape(-1, n) @ np.ones(n, x.dtype)).reshape(*x.shape[:-1], 1)


def row_max(x: np.ndarray) -> np.ndarray:
    """x.max(-1, keepdims=True)."""
    if x.shape[-1] <= 16:                # a loop over the columns
        out = x[..., 0].copy()
        for i in range(1, x.shape[-1]):
            np.maximum(out, x[..., i], out=out)
        return out[..., None]
    if x.dtype == np.float64:            # longer rows: NumPy's reduction, in float64 ...
        return x.max(-1, keepdims=True)
    while x.shape[-1] > 1:               # ... in float32 (measured 1.3-3x faster) halving them
        n = x.shape[-1]
        half = (n + 1) // 2
        x = np.maximum(x[..., :half], x[..., n - half:])
    return x


def hook_names(cfg: ModelConfig) -> list[str]:
    """The ordered names of every activation `forward` records (TransformerLens's names)."""
    names = ["hook_embed", "hook_pos_embed"]
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        names.append(b + "hook_resid_pre")
        if cfg.normalization == "pre_ln":
            names += [b + "ln1.hook_scale", b + "ln1.hook_normalized"]
        names += [b + f"attn.hook_{n}" for n in ("q", "k", "v", "attn_scores", "pattern", "z")]
        names.append(b + "hook_attn_out")
        if not cfg.attn_only:
            names.append(b + "hook_resid_mid")
            if cfg.normalization == "pre_ln":
                names += [b + "ln2.hook_scale", b + "ln2.hook_normalized"]
            names += [b + "mlp.hook_pre", b + "mlp.hook_post", b + "hook_mlp_out"]
        names.append(b + "hook_resid_post")
    if cfg.ln_final:
        names += ["ln_final.hook_scale", "ln_final.hook_normalized"]
    return names


def layer_norm(x, w, b):
    """TransformerLens's LayerNorm on (S, B, T, d): returns (scale, x_hat, output)."""
    if fused := fused_for(x, w, b):
        return fused.layer_norm(x, w, b)
    d = x.shape[-1]
    x_hat = x - row_sum(x) / d
    scale = np.sqrt(row_sum(x_hat * x_hat) / d + LN_EPS)
    x_hat /= scale
    out = x_hat * w[:, None, None]
    out += b[:, None, None]
    return scale, x_hat, out


# Elementwise work on big activations goes one cache-sized block at a time: a chain of NumPy
# passes over a whole array of a million entries streams it through memory once per pass (the
# tanh is no dearer than a multiply), over a block of BLOCK entries it stays in the L2 cache.
BLOCK = 1 << 15


def blocks(*arrays):
    """Matching flat slices of BLOCK entries of the given arrays (all C-contiguous, same size)."""
    if not all(a.flags.c_contiguous for a in arrays):
        raise ValueError("blocks: every array must be C-contiguous (a copy would drop writes)")
    flats = [a.reshape(-1) for a in arrays]
    for i in range(0, flats[0].size, BLOCK):
        yield [f[i:i + BLOCK] for f in flats]


def gelu(pre):
    """GPT-2's tanh GELU, 0.5 x (1 + tanh(c (x + 0.044715 x^3))), and the tanh, which its
    derivative reuses."""
    pre = np.ascontiguousarray(pre)
    if fused := fused_for(pre):
        return fused.gelu(pre)
    post, t = np.empty_like(pre), np.empty_like(pre)
    for x, p, h in blocks(pre, post, t):
        np.multiply(x, x, out=h)
        h *= 0.044715
        h += 1.0
        h *= x
        h *= GELU_C
        np.tanh(h, out=h)
        np.add(h, 1.0, out=p)
        p *= x
        p *= 0.5
    return post, t


def gelu_backward(dpost, pre, t):
    """dpost * d gelu / d pre, in place on dpost, given t = gelu(pre)[1]: the derivative
    0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2), with 1 - t^2 = (1 - t) (1 + t), is
    0.5 (1 + t) (1 + x (1 - t) c (1 + 3 * 0.044715 x^2))."""
    if fused := fused_for(dpost, pre, t):
        return fused.gelu_backward(dpost, pre, t)
    for dy, x, h in blocks(dpost, np.ascontiguousarray(pre), np.ascontiguousarray(t)):
        g = x * x
        g *= 3 * 0.044715 * GELU_C
        g += GELU_C
        g *= x
        g *= 1.0 - h
        g += 1.0
        g *= 0.5 + 0.5 * h
        dy *= g
    return dpost


def activation(cfg: ModelConfig, pre):
    if cfg.act_fn == "relu":
        return np.maximum(pre, 0.0)
    return gelu(pre)[0]


def activation_grad(cfg: ModelConfig, pre):
    """d activation / d pre, elementwise."""
    if cfg.act_fn == "relu":
        return (pre > 0).astype(pre.dtype)
    return gelu_backward(np.ones(np.shape(pre), np.result_type(pre)), pre, gelu(pre)[1])


def softmax(x):
    """The softmax over the last axis of x, in place (-inf entries give 0)."""
    if fused := fused_for(x):
        return fused.softmax(x)
    x -= row_max(x)
    np.exp(x, out=x)
    x /= row_sum(x)
    return x


def softmax_backward(dpattern, pattern, divisor: float):
    """dloss/dscores from dloss/dpattern, in place, for pattern = softmax(scores / divisor):
    pattern (dpattern - sum(dpattern pattern)) / divisor per row, 0 where masked."""
    if fused := fused_for(dpattern, pattern):
        return fused.softmax_backward(dpattern, pattern, divisor)
    dpattern -= row_sum(dpattern * pattern)
    dpattern *= pattern
    dpattern /= divisor
    return dpattern


@lru_cache(maxsize=None)
def causal_mask(T: int) -> np.ndarray:
    return np.tril(np.ones((T, T), dtype=bool))


@lru_cache(maxsize=None)
def causal_bias(T: int, dtype) -> np.ndarray:
    """Added to attention scores: 0 where a query may read a key (key <= query), -inf above."""
    bias = np.where(causal_mask(T), 0.0, -np.inf).astype(dtype)
    bias.flags.writeable = False
    return bias


def qkv_weights(params: Params, b: str) -> np.ndarray:
    """W_Q, W_K and W_V of block `b` side by side, (S, d, 3 * H * dh): one matrix product makes
    (or differentiates) all three."""
    W = np.stack([params[b + f"attn.W_{w}"] for w in "QKV"], axis=1)      # (S,3,H,d,dh)
    S, _, H, d, dh = W.shape
    return W.transpose(0, 3, 1, 2, 4).reshape(S, d, 3 * H * dh)


def forward(params: Params, tokens: np.ndarray, hooks: dict | None = None,
            read: np.ndarray | None = None):
    """Logits (S, B, T, V) and the cache of named activations, each with a leading seed axis.

    `hooks` maps activation names to `fn(activation, name) -> activation`; the returned array
    replaces the activation downstream. Activation shapes follow TransformerLens with the seed
    axis in front: hook_q is (S, B, T, H, dh), hook_pattern (S, B, H, T, T).

    `read` (sorted positions; for training): logits only there, (S, B, P, V). The last block
    then attends from those P queries only and computes everything after attention only there,
    so its activations from the scores on have P positions where they would have T; `backward`
    gives the gradients of the full pass whose logits elsewhere the loss ignores. A loss that
    reads only the answer position skips most of the last block.
    """
    cfg = params.cfg
    S, B, T = tokens.shape
    N, d, H, dh = B * T, cfg.d_model, cfg.n_heads, cfg.d_head
    if T > cfg.n_ctx:
        raise FlatformerError(f"sequence of {T} tokens is longer than the context of {cfg.n_ctx}")
    cache: dict[str, np.ndarray] = {}

    def hook(name, x):
        if hooks and name in hooks:
            x = hooks[name](x, name)
        cache[name] = x
        return x

    cache["_tokens"] = tokens
    x = hook("hook_embed", params["embed.W_E"][np.arange(S)[:, None, None], tokens])
    p = hook("hook_pos_embed", np.broadcast_to(params["pos_embed.W_pos"][:, None, :T], (S, B, T, d)))
    resid = x + p                                                          # e = x + p
    if read is not None:
        cache["_read"] = read
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        rows = read if read is not None and layer == cfg.n_layers - 1 else None
        mask = causal_bias(T, params.flat.dtype)
        resid = hook(b + "hook_resid_pre", resid)
        attn_in = resid
        if cfg.normalization == "pre_ln":
            scale, x_hat, attn_in = layer_norm(
                resid, params[b + "ln1.w"], params[b + "ln1.b"])
            cache["_" + b + "ln1.x_hat"] = x_hat
            hook(b + "ln1.hook_scale", scale)
            attn_in = hook(b + "ln1.hook_normalized", attn_in)
        qkv = attn_in.reshape(S, N, d) @ qkv_weights(params, b)              # (S,N,3*H*dh)
        if cfg.qkv_bias:
            qkv += np.stack([params[b + f"attn.b_{w}"] for w in "QKV"], 1).reshape(S, 1, -1)
        qkv = qkv.reshape(S, B, T, 3, H, dh)
        q, k, v = [hook(b + f"attn.hook_{w}", qkv[:, :, :, i]).transpose(0, 1, 3, 2, 4)
                   for i, w in enumerate("qkv")]                             # (S,B,H,T,dh)
        if rows is not None:   # the queries the loss reads; their keys and values are all kept
            q, mask = q[:, :, :, rows], mask[rows]
        scores = q @ k.swapaxes(-1, -2)
        scores /= math.sqrt(dh)
        scores += mask
        scores = hook(b + "attn.hook_attn_scores", scores)                     # (S,B,H,T,T)
        pattern = softmax(scores + mask)         # masked again, should a hook have unmasked it
        pattern = hook(b + "attn.hook_pattern", pattern)
        z = hook(b + "attn.hook_z", (pattern @ v).transpose(0, 1, 3, 2, 4))    # (S,B,T,H,dh)
        attn_out = z.reshape(S, -1, H * dh)
        if rows is not None:
            resid = resid[:, :, rows]
        if cfg.attn_out:
            attn_out = attn_out @ params[b + "attn.W_O"].reshape(S, H * dh, d)
        attn_out = hook(b + "hook_attn_out", attn_out.reshape(S, B, -1, d))
        if cfg.attn_only:
            resid = hook(b + "hook_resid_post", resid + attn_out)
            continue
        resid = hook(b + "hook_resid_mid", resid + attn_out)                   # z = e + Attn(e)
        mlp_in = resid
        if cfg.normalization == "pre_ln":
            scale, x_hat, mlp_in = layer_norm(
                resid, params[b + "ln2.w"], params[b + "ln2.b"])
            cache["_" + b + "ln2.x_hat"] = x_hat
            hook(b + "ln2.hook_scale", scale)
            mlp_in = hook(b + "ln2.hook_normalized", mlp_in)
        pre = mlp_in.reshape(S, -1, d) @ params[b + "mlp.W_in"]
        pre += params[b + "mlp.b_in"][:, None]
        pre = hook(b + "mlp.hook_pre", pre.reshape(S, B, -1, cfg.d_mlp))
        if cfg.act_fn == "relu":
            post = np.maximum(pre, 0.0)
        else:
            post, cache["_" + b + "mlp.tanh"] = gelu(pre)
        post = hook(b + "mlp.hook_post", post)
        mlp_out = post.reshape(S, -1, cfg.d_mlp) @ params[b + "mlp.W_out"]
        mlp_out += params[b + "mlp.b_out"][:, None]
        mlp_out = hook(b + "hook_mlp_out", mlp_out.reshape(S, B, -1, d))
        resid = hook(b + "hook_resid_post", resid + mlp_out)                   # h = z + FFN(z)
    if cfg.ln_final:
        scale, x_hat, resid = layer_norm(resid, params["ln_final.w"], params["ln_final.b"])
        cache["_ln_final.x_hat"] = x_hat
        hook("ln_final.hook_scale", scale)
        resid = hook("ln_final.hook_normalized", resid)
    logits = resid.reshape(S, -1, d) @ params["unembed.W_U"]
    if cfg.unembed_bias:
        logits += params["unembed.b_U"][:, None]
    return logits.reshape(S, B, -1, cfg.d_vocab), cache


def layer_norm_backward(dy, xhat, scale, w, grads: Params, name: str):
    """Gradient through LayerNorm, (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) / scale with
    dxhat = dy w; writes the gain and bias gradients into `grads`."""
    if fused := fused_for(dy, xhat, scale, w):
        return fused.layer_norm_backward(dy, xhat, scale, w, grads[name + ".w"],
                                         grads[name + ".b"])
    S, d = dy.shape[0], dy.shape[-1]
    rows = (*dy.shape[:-1], 1)
    dy_xhat = dy * xhat
    grads[name + ".w"][...] = dy_xhat.reshape(S, -1, d).sum(1)
    grads[name + ".b"][...] = dy.reshape(S, -1, d).sum(1)
    # Both means are products with the gain: mean(dy w) = dy . w / d, mean(dy w xhat) likewise.
    w_mean = w[:, :, None] / d                                               # (S, d, 1)
    mean_dxhat = (dy.reshape(S, -1, d) @ w_mean).reshape(rows)
    mean_dxhat_xhat = (dy_xhat.reshape(S, -1, d) @ w_mean).reshape(rows)
    dx = dy * w[:, None, None]
    dx -= mean_dxhat
    dx -= np.multiply(xhat, mean_dxhat_xhat, out=dy_xhat)
    dx /= scale
    return dx


def mlp_backward(params: Params, cache: dict, dresid: np.ndarray, grads: Params, b: str):
    """Gradient through block `b`'s MLP, h = z + W_out act(W_in ln2(z) + b_in) + b_out: returns
    dloss/dz (S, N, d) and writes the MLP's (and ln2's) parameter gradients into `grads`."""
    cfg = params.cfg
    S, N, d, m = dresid.shape[0], dresid.shape[1], cfg.d_model, cfg.d_mlp
    B, T = cache[b + "hook_resid_mid"].shape[1:3]
    post = cache[b + "mlp.hook_post"].reshape(S, N, m)
    pre = cache[b + "mlp.hook_pre"].reshape(S, N, m)
    grads[b + "mlp.W_out"][...] = post.swapaxes(1, 2) @ dresid
    grads[b + "mlp.b_out"][...] = dresid.sum(1)
    dpre = dresid @ params[b + "mlp.W_out"].swapaxes(1, 2)                # dloss/dpost
    if cfg.act_fn == "relu":
        dpre *= pre > 0
    else:
        gelu_backward(dpre, pre, cache["_" + b + "mlp.tanh"])
    mlp_in = (cache[b + "ln2.hook_normalized"] if cfg.normalization == "pre_ln"
              else cache[b + "hook_resid_mid"]).reshape(S, N, d)
    grads[b + "mlp.W_in"][...] = mlp_in.swapaxes(1, 2) @ dpre
    grads[b + "mlp.b_in"][...] = dpre.sum(1)
    dmlp_in = dpre @ params[b + "mlp.W_in"].swapaxes(1, 2)
    if cfg.normalization == "pre_ln":
        dmlp_in = layer_norm_backward(
            dmlp_in.reshape(S, B, T, d), cache["_" + b + "ln2.x_hat"],
            cache[b + "ln2.hook_scale"], params[b + "ln2.w"], grads, b + "ln2").reshape(S, N, d)
    return dresid + dmlp_in


def backward(params: Params, cache: dict, dlogits: np.ndarray) -> Params:
    """Gradients of a loss with respect to every parameter, given dloss/dlogits (S, B, T, V)
    ((S, B, P, V) after a forward pass that read only P positions)."""
    cfg = params.cfg
    S, B, _, V = dlogits.shape
    T = cache["hook_embed"].shape[2]
    N, d, H, dh = B * T, cfg.d_model, cfg.n_heads, cfg.d_head
    read = cache.get("_read")
    grads = params.like()
    dlogits = dlogits.reshape(S, -1, V)
    last = ("ln_final.hook_normalized" if cfg.ln_final
            else f"blocks.{cfg.n_layers - 1}.hook_resid_post")
    grads["unembed.W_U"][...] = cache[last].reshape(S, -1, d).swapaxes(1, 2) @ dlogits
    if cfg.unembed_bias:
        grads["unembed.b_U"][...] = dlogits.sum(1)
    dresid = dlogits @ params["unembed.W_U"].swapaxes(1, 2)                   # (S,N,d)
    if cfg.ln_final:
        dresid = layer_norm_backward(
            dresid.reshape(S, B, -1, d), cache["_ln_final.x_hat"], cache["ln_final.hook_scale"],
            params["ln_final.w"], grads, "ln_final").reshape(S, -1, d)
    for layer in reversed(range(cfg.n_layers)):
        b = f"blocks.{layer}."
        rows = read if read is not None and layer == cfg.n_layers - 1 else None
        if not cfg.attn_only:
            dresid = mlp_backward(params, cache, dresid, grads, b)
        # Attention: z = e + concat_h(softmax(q k^T / sqrt(dh)) v) [W_O]
        dz = dresid
        if cfg.attn_out:
            z_flat = cache[b + "attn.hook_z"].reshape(S, -1, H * dh)
            W_O = params[b + "attn.W_O"].reshape(S, H * dh, d)
            grads[b + "attn.W_O"][...] = (z_flat.swapaxes(1, 2) @ dresid).reshape(S, H, dh, d)
            dz = dresid @ W_O.swapaxes(1, 2)
        dz = dz.reshape(S, B, -1, H, dh).transpose(0, 1, 3, 2, 4)              # (S,B,H,T,dh)
        q, k, v = (cache[b + f"attn.hook_{w}"].transpose(0, 1, 3, 2, 4) for w in "qkv")
        pattern = cache[b + "attn.hook_pattern"]
        # dq, dk and dv side by side, as the forward pass's q, k and v came out of one product
        # (dq is 0 at queries the loss does not read)
        dqkv = (np.empty if rows is None else np.zeros)((S, B, T, 3, H, dh), dresid.dtype)
        dq, dk, dv = (dqkv[:, :, :, i].transpose(0, 1, 3, 2, 4) for i in range(3))
        np.matmul(pattern.swapaxes(-1, -2), dz, out=dv)
        dscores = softmax_backward(dz @ v.swapaxes(-1, -2), pattern, math.sqrt(dh))
        if rows is None:
            np.matmul(dscores, k, out=dq)
        else:
            dq[:, :, :, rows] = dscores @ k
            q = q[:, :, :, rows]
        np.matmul(dscores.swapaxes(-1, -2), q, out=dk)
        dqkv = dqkv.reshape(S, N, 3 * H * dh)
        attn_in = (cache[b + "ln1.hook_normalized"] if cfg.normalization == "pre_ln"
                   else cache[b + "hook_resid_pre"]).reshape(S, N, d)
        dW = (attn_in.swapaxes(1, 2) @ dqkv).reshape(S, d, 3, H, dh)
        for i, w in enumerate("QKV"):
            grads[b + f"attn.W_{w}"][...] = dW[:, :, i].transpose(0, 2, 1, 3)
        if cfg.qkv_bias:
            db = dqkv.sum(1).reshape(S, 3, H, dh)
            for i, w in enumerate("QKV"):
                grads[b + f"attn.b_{w}"][...] = db[:, i]
        dattn_in = dqkv @ qkv_weights(params, b).swapaxes(1, 2)
        if cfg.normalization == "pre_ln":
            dattn_in = layer_norm_backward(
                dattn_in.reshape(S, B, T, d), cache["_" + b + "ln1.x_hat"],
                cache[b + "ln1.hook_scale"], params[b + "ln1.w"], grads, b + "ln1").reshape(S, N, d)
        if rows is not None:   # the residual stream after attention was kept at those rows only
            full = np.zeros((S, B, T, d), dresid.dtype)
            full[:, :, rows] = dresid.reshape(S, B, -1, d)
            dresid = full.reshape(S, N, d)
        dresid = dresid + dattn_in
    grads["pos_embed.W_pos"][:, :T] = dresid.reshape(S, B, T, d).sum(1)
    onehot = cache["_tokens"].reshape(S, N, 1) == np.arange(cfg.d_vocab)
    grads["embed.W_E"][...] = onehot.astype(dresid.dtype).swapaxes(1, 2) @ dresid
    return grads


def cross_entropy(logits: np.ndarray, targets: np.ndarray, weights: np.ndarray):
    """Per-seed weighted mean next-token loss (S,) and its gradient with respect to the logits.

    `weights` (S, B, T) is 1 where a target counts and 0 where it is dropped. Both results have
    the logits' dtype (float64 weights would turn a float32 backward pass into a float64 one).
    """
    weights = weights.astype(logits.dtype, copy=False)
    shifted = logits - row_max(logits)
    exp = np.exp(shifted)
    sumexp = row_sum(exp)
    nll = np.log(sumexp[..., 0]) - np.take_along_axis(shifted, targets[..., None], -1)[..., 0]
    total = np.maximum(weights.sum((1, 2)), 1.0)                             # (S,)
    loss = (nll * weights).sum((1, 2)) / total
    dlogits = exp
    dlogits /= sumexp
    rows = dlogits.reshape(-1, logits.shape[-1])               # softmax - onehot: one per row
    rows[np.arange(len(rows)), targets.ravel()] -= 1.0
    dlogits *= (weights / total[:, None, None])[..., None]
    return loss, dlogits
