"""The NumPy transformer: the reference forward pass, with every named activation a hook
point, and its hand-written backward pass, both composed of components.py's functions.

Every parameter carries a leading seed axis S, so many independent models run as one batched
program (params.py holds them). The components broadcast over it: a weight (S, d_in, d_out)
multiplies activations (S, N, d_in), a gain (S, 1, 1, d) scales activations (S, B, T, d).

Shapes in comments: S seeds, B sequences, T positions, H heads, d d_model, dh d_head, m d_mlp,
V d_vocab, N = B * T.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..config import ModelConfig
from ..errors import FlatformerError
from .components import (
    REFERENCE,
    Kit,
    attention,
    attention_backward,
    causal_bias,
    embed,
    embed_backward,
    linear,
    linear_backward,
    mlp,
    mlp_backward,
    pos_embed,
    pos_embed_backward,
    sum_to,
)
from .params import Params, init_params

__all__ = [
    "Params",
    "backward",
    "cross_entropy",
    "forward",
    "hook_names",
    "init_params",
    "keep_freed_memory",
    "kit_for",
    "qkv_weights",
]


@lru_cache(maxsize=None)
def keep_freed_memory():
    """Ask glibc to keep freed blocks for reuse instead of handing them back to the OS.

    The engine allocates the same few-hundred-kilobyte activations every step; by default glibc
    maps each afresh and unmaps it when freed, and the page faults of touching new memory cost
    more than the arithmetic (at 64 seeds, keeping them made the forward pass about 3x faster
    and the backward 2x).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD: keep up to 256 MB free at the top
        libc.mallopt(-3, 64 << 20)  # M_MMAP_THRESHOLD: serve blocks below 64 MB from the heap
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune


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


@lru_cache(maxsize=None)
def kit_for(dtype) -> Kit:
    """The elementwise steps the components run with: in float32, the compiled ones (fused.KIT)
    where numba is installed, one pass over memory each where NumPy makes several; else the
    components' own NumPy, the reference. Imported on first use: numba takes 0.3 s to import,
    which commands that never run float32 need not pay."""
    if np.dtype(dtype) == np.float32:
        try:
            from .fused import KIT
        except ImportError:  # numba missing: NumPy does it all
            return REFERENCE
        return KIT
    return REFERENCE


def forward(
    params: Params, tokens: np.ndarray, hooks: dict | None = None, read: np.ndarray | None = None
):
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
    kit = kit_for(params.flat.dtype)
    cache: dict[str, np.ndarray] = {}

    def hook(name, x):
        if hooks and name in hooks:
            x = hooks[name](x, name)
        cache[name] = x
        return x

    def hooks_in(prefix, shape=None):
        """A component's hook points, named under `prefix`; with `shape`, the component's rows
        (S, N, ...) are shown to hooks and the cache as (S, B, T, ...)."""
        if shape is None:
            return lambda name, x: hook(prefix + name, x)
        return lambda name, x: hook(prefix + name, x.reshape(*shape, -1)).reshape(x.shape)

    def norm(x, name):
        """LayerNorm `name` on the stream x (S, B, T, d), its two activations hooked."""
        out, x_hat, scale = kit.layer_norm(
            x, params[name + ".w"][:, None, None], params[name + ".b"][:, None, None]
        )
        cache["_" + name + ".x_hat"] = x_hat
        hook(name + ".hook_scale", scale)
        return hook(name + ".hook_normalized", out)

    cache["_tokens"] = tokens
    x = hook("hook_embed", embed(params["embed.W_E"], tokens))
    p = hook("hook_pos_embed", pos_embed(params["pos_embed.W_pos"], tokens))
    resid = x + p  # e = x + p
    if read is not None:
        cache["_read"] = read
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        rows = read if read is not None and layer == cfg.n_layers - 1 else None
        mask = attention_bias(cfg, T, params.flat.dtype)
        resid = hook(b + "hook_resid_pre", resid)
        attn_in = norm(resid, b + "ln1") if cfg.normalization == "pre_ln" else resid
        qkv = linear(attn_in.reshape(S, N, d), qkv_weights(params, b), qkv_biases(params, b))
        qkv = qkv.reshape(S, B, T, 3, H, dh)
        q, k, v = [
            hook(b + f"attn.hook_{w}", qkv[:, :, :, i]).transpose(0, 1, 3, 2, 4)
            for i, w in enumerate("qkv")
        ]  # (S,B,H,T,dh)
        if rows is not None:  # the queries the loss reads; their keys and values are all kept
            q, mask = q[:, :, :, rows], attention_bias(cfg, T, params.flat.dtype, rows)
            resid = resid[:, :, rows]
        z, _ = attention(q, k, v, mask, hooks_in(b + "attn."), kit, cfg.attn_coeff)  # (S,B,H,T,dh)
        z = hook(b + "attn.hook_z", z.transpose(0, 1, 3, 2, 4))  # (S,B,T,H,dh)
        attn_out = z.reshape(S, -1, H * dh)  # the heads side by side
        if cfg.attn_out:
            attn_out = linear(attn_out, params[b + "attn.W_O"].reshape(S, H * dh, d))
        if cfg.attn_out_bias:
            attn_out = attn_out + params[b + "attn.b_O"][:, None]
        attn_out = hook(b + "hook_attn_out", attn_out.reshape(S, B, -1, d))
        if cfg.attn_only:
            resid = hook(b + "hook_resid_post", resid + attn_out)
            continue
        resid = hook(b + "hook_resid_mid", resid + attn_out)  # z = e + Attn(e)
        mlp_in = norm(resid, b + "ln2") if cfg.normalization == "pre_ln" else resid
        mlp_out, (_, _, tanh) = mlp(
            mlp_in.reshape(S, -1, d),
            *mlp_weights(params, b),
            cfg.act_fn,
            hooks_in(b + "mlp.", resid.shape[:3]),
            kit,
        )
        if tanh is not None:
            cache["_" + b + "mlp.tanh"] = tanh
        mlp_out = hook(b + "hook_mlp_out", mlp_out.reshape(S, B, -1, d))
        resid = hook(b + "hook_resid_post", resid + mlp_out)  # h = z + FFN(z)
    if cfg.ln_final:
        resid = norm(resid, "ln_final")
    logits = linear(resid.reshape(S, -1, d), params["unembed.W_U"], unembed_bias(params))
    return logits.reshape(S, B, -1, cfg.vocab_out), cache


def attention_bias(cfg: ModelConfig, T: int, dtype, rows=None) -> np.ndarray:
    """Added to the attention scores (T, T), or (P, T) at the query rows `rows`: the causal
    mask's 0 and -inf, or zeros where every query reads every key (causal: false)."""
    mask = causal_bias(T, dtype) if cfg.causal else np.zeros((T, T), dtype)
    return mask if rows is None else mask[rows]


def qkv_weights(params: Params, b: str) -> np.ndarray:
    """W_Q, W_K and W_V of block `b` side by side, (S, d, 3 * H * dh): one matrix product makes
    (or differentiates) all three."""
    W = np.stack([params[b + f"attn.W_{w}"] for w in "QKV"], axis=1)  # (S,3,H,d,dh)
    S, _, H, d, dh = W.shape
    return W.transpose(0, 3, 1, 2, 4).reshape(S, d, 3 * H * dh)


def qkv_biases(params: Params, b: str) -> np.ndarray | None:
    """b_Q, b_K and b_V of block `b` side by side, (S, 1, 3 * H * dh), as qkv_weights; None
    without them."""
    if not params.cfg.qkv_bias:
        return None
    S = params.n_seeds
    return np.stack([params[b + f"attn.b_{w}"] for w in "QKV"], 1).reshape(S, 1, -1)


def mlp_weights(params: Params, b: str) -> tuple:
    """(W_in, b_in, W_out, b_out) of block `b`, the biases (S, 1, m) and (S, 1, d)."""
    return (
        params[b + "mlp.W_in"],
        params[b + "mlp.b_in"][:, None],
        params[b + "mlp.W_out"],
        params[b + "mlp.b_out"][:, None],
    )


def unembed_bias(params: Params) -> np.ndarray | None:
    return params["unembed.b_U"][:, None] if params.cfg.unembed_bias else None


def backward(params: Params, cache: dict, dlogits: np.ndarray) -> Params:
    """Gradients of a loss with respect to every parameter, given dloss/dlogits (S, B, T, V)
    ((S, B, P, V) after a forward pass that read only P positions)."""
    cfg = params.cfg
    S, B, _, V = dlogits.shape
    T = cache["hook_embed"].shape[2]
    N, d, H, dh = B * T, cfg.d_model, cfg.n_heads, cfg.d_head
    read = cache.get("_read")
    kit = kit_for(params.flat.dtype)
    grads = params.like()

    def norm_backward(dy, name):
        """dloss/dx through LayerNorm `name` (dy (S, B, T, d)); its gain and bias gradients
        into `grads`."""
        dx, dw, db = kit.layer_norm_backward(
            dy,
            cache["_" + name + ".x_hat"],
            cache[name + ".hook_scale"],
            params[name + ".w"][:, None, None],
        )
        grads[name + ".w"][...] = dw.reshape(S, d)
        grads[name + ".b"][...] = db.reshape(S, d)
        return dx

    last = (
        "ln_final.hook_normalized" if cfg.ln_final else f"blocks.{cfg.n_layers - 1}.hook_resid_post"
    )
    dresid, grads["unembed.W_U"][...], db_U = linear_backward(
        dlogits.reshape(S, -1, V),
        cache[last].reshape(S, -1, d),
        params["unembed.W_U"],
        unembed_bias(params),
    )  # dresid (S,N,d)
    if cfg.unembed_bias:
        grads["unembed.b_U"][...] = db_U.reshape(S, V)
    if cfg.ln_final:
        dresid = norm_backward(dresid.reshape(S, B, -1, d), "ln_final").reshape(S, -1, d)
    for layer in reversed(range(cfg.n_layers)):
        b = f"blocks.{layer}."
        rows = read if read is not None and layer == cfg.n_layers - 1 else None
        if not cfg.attn_only:  # h = z + FFN(z)
            pre_ln = cfg.normalization == "pre_ln"
            mlp_in = cache[b + "ln2.hook_normalized" if pre_ln else b + "hook_resid_mid"]
            pre, post = (
                cache[b + f"mlp.hook_{w}"].reshape(S, -1, cfg.d_mlp) for w in ("pre", "post")
            )
            dmlp_in, weight_grads = mlp_backward(
                dresid,
                mlp_in.reshape(S, -1, d),
                *mlp_weights(params, b),
                cfg.act_fn,
                (pre, post, cache.get("_" + b + "mlp.tanh")),
                kit,
            )
            for name, g in zip(("W_in", "b_in", "W_out", "b_out"), weight_grads):
                grads[b + "mlp." + name][...] = g.reshape(grads[b + "mlp." + name].shape)
            if pre_ln:
                dmlp_in = norm_backward(dmlp_in.reshape(mlp_in.shape), b + "ln2").reshape(S, -1, d)
            dresid = dresid + dmlp_in
        # z = e + concat_h(attention(q, k, v)) [W_O] [+ b_O]
        dz = dresid
        if cfg.attn_out:
            z_flat = cache[b + "attn.hook_z"].reshape(S, -1, H * dh)
            dz, dW_O, _ = linear_backward(
                dresid, z_flat, params[b + "attn.W_O"].reshape(S, H * dh, d)
            )
            grads[b + "attn.W_O"][...] = dW_O.reshape(S, H, dh, d)
        if cfg.attn_out_bias:
            grads[b + "attn.b_O"][...] = sum_to(dresid, (S, 1, d)).reshape(S, d)
        dz = dz.reshape(S, B, -1, H, dh).transpose(0, 1, 3, 2, 4)  # (S,B,H,T,dh)
        q, k, v = (cache[b + f"attn.hook_{w}"].transpose(0, 1, 3, 2, 4) for w in "qkv")
        if rows is not None:
            q = q[:, :, :, rows]
        pattern = cache[b + "attn.hook_pattern"]
        dq, dk, dv = attention_backward(
            dz, q, k, v, pattern, kit, cfg.attn_coeff, attention_bias(cfg, T, pattern.dtype, rows)
        )
        # dq, dk and dv side by side, as q, k and v came out of one product (dq is 0 at
        # queries the loss does not read)
        dqkv = (np.empty if rows is None else np.zeros)((S, B, T, 3, H, dh), dresid.dtype)
        dqkv[:, :, slice(None) if rows is None else rows, 0] = dq.transpose(0, 1, 3, 2, 4)
        dqkv[:, :, :, 1] = dk.transpose(0, 1, 3, 2, 4)
        dqkv[:, :, :, 2] = dv.transpose(0, 1, 3, 2, 4)
        attn_in = cache[
            b + "ln1.hook_normalized" if cfg.normalization == "pre_ln" else b + "hook_resid_pre"
        ].reshape(S, N, d)
        dattn_in, dW, db = linear_backward(
            dqkv.reshape(S, N, 3 * H * dh), attn_in, qkv_weights(params, b), qkv_biases(params, b)
        )
        dW = dW.reshape(S, d, 3, H, dh)
        for i, w in enumerate("QKV"):
            grads[b + f"attn.W_{w}"][...] = dW[:, :, i].transpose(0, 2, 1, 3)
        if cfg.qkv_bias:
            db = db.reshape(S, 3, H, dh)
            for i, w in enumerate("QKV"):
                grads[b + f"attn.b_{w}"][...] = db[:, i]
        if cfg.normalization == "pre_ln":
            dattn_in = norm_backward(dattn_in.reshape(S, B, T, d), b + "ln1").reshape(S, N, d)
        if rows is not None:  # the residual stream after attention was kept at those rows only
            full = np.zeros((S, B, T, d), dresid.dtype)
            full[:, :, rows] = dresid.reshape(S, B, -1, d)
            dresid = full.reshape(S, N, d)
        dresid = dresid + dattn_in
    dresid = dresid.reshape(S, B, T, d)  # e = x + p
    grads["pos_embed.W_pos"][...] = pos_embed_backward(dresid, params["pos_embed.W_pos"])
    grads["embed.W_E"][...] = embed_backward(dresid, cache["_tokens"], params["embed.W_E"])
    return grads


def row_sum(x: np.ndarray) -> np.ndarray:
    """x.sum(-1, keepdims=True) as a product with ones: NumPy reduces a short last axis one row
    at a time, with overhead per row; a matrix-vector product does the same work 5-10x faster."""
    n = x.shape[-1]
    return (x.reshape(-1, n) @ np.ones(n, x.dtype)).reshape(*x.shape[:-1], 1)


def cross_entropy(logits: np.ndarray, targets: np.ndarray, weights: np.ndarray):
    """Per-seed weighted mean next-token loss (S,) and its gradient with respect to the logits.

    `weights` (S, B, T) is 1 where a target counts and 0 where it is dropped. Both results have
    the logits' dtype (float64 weights would turn a float32 backward pass into a float64 one).
    """
    weights = weights.astype(logits.dtype, copy=False)
    shifted = logits - logits.max(-1, keepdims=True)
    exp = np.exp(shifted)
    sumexp = row_sum(exp)
    nll = np.log(sumexp[..., 0]) - np.take_along_axis(shifted, targets[..., None], -1)[..., 0]
    total = np.maximum(weights.sum((1, 2)), 1.0)  # (S,)
    loss = (nll * weights).sum((1, 2)) / total
    dlogits = exp
    dlogits /= sumexp
    rows = dlogits.reshape(-1, logits.shape[-1])  # softmax - onehot: one per row
    rows[np.arange(len(rows)), targets.ravel()] -= 1.0
    dlogits *= (weights / total[:, None, None])[..., None]
    return loss, dlogits
