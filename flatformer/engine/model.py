"""The NumPy transformer: forward pass with named activations, and its hand-written backward pass.

Every parameter carries a leading seed axis S, so many independent models run as one batched
program (params.py holds them; ops.py the layers' elementwise pieces and their backward passes).

Shapes in comments: S seeds, B sequences, T positions, H heads, d d_model, dh d_head, m d_mlp,
V d_vocab, N = B * T.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..config import GELU_C, ModelConfig
from ..errors import FlatformerError
from .ops import (
    BLOCK,
    activation,
    activation_grad,
    attention_pattern,
    blocks,
    causal_bias,
    causal_mask,
    erf,
    fused_for,
    gelu,
    gelu_backward,
    gelu_erf,
    gelu_erf_grad,
    layer_norm,
    layer_norm_backward,
    row_max,
    row_sum,
    softmax,
    softmax_backward,
)
from .params import Params, init_params

# Re-exported: the layers and parameters moved to ops.py and params.py; importers name them here.
__all__ = [
    "BLOCK",
    "GELU_C",
    "Params",
    "activation",
    "activation_grad",
    "attention_pattern",
    "backward",
    "blocks",
    "causal_bias",
    "causal_mask",
    "cross_entropy",
    "erf",
    "forward",
    "fused_for",
    "gelu",
    "gelu_backward",
    "gelu_erf",
    "gelu_erf_grad",
    "hook_names",
    "init_params",
    "keep_freed_memory",
    "layer_norm",
    "layer_norm_backward",
    "qkv_weights",
    "row_max",
    "row_sum",
    "softmax",
    "softmax_backward",
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


def qkv_weights(params: Params, b: str) -> np.ndarray:
    """W_Q, W_K and W_V of block `b` side by side, (S, d, 3 * H * dh): one matrix product makes
    (or differentiates) all three."""
    W = np.stack([params[b + f"attn.W_{w}"] for w in "QKV"], axis=1)  # (S,3,H,d,dh)
    S, _, H, d, dh = W.shape
    return W.transpose(0, 3, 1, 2, 4).reshape(S, d, 3 * H * dh)


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
    cache: dict[str, np.ndarray] = {}

    def hook(name, x):
        if hooks and name in hooks:
            x = hooks[name](x, name)
        cache[name] = x
        return x

    cache["_tokens"] = tokens
    x = hook("hook_embed", params["embed.W_E"][np.arange(S)[:, None, None], tokens])
    p = hook(
        "hook_pos_embed", np.broadcast_to(params["pos_embed.W_pos"][:, None, :T], (S, B, T, d))
    )
    resid = x + p  # e = x + p
    if read is not None:
        cache["_read"] = read
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        rows = read if read is not None and layer == cfg.n_layers - 1 else None
        mask = (
            causal_bias(T, params.flat.dtype) if cfg.causal else np.zeros((T, T), params.flat.dtype)
        )
        resid = hook(b + "hook_resid_pre", resid)
        attn_in = resid
        if cfg.normalization == "pre_ln":
            scale, x_hat, attn_in = layer_norm(resid, params[b + "ln1.w"], params[b + "ln1.b"])
            cache["_" + b + "ln1.x_hat"] = x_hat
            hook(b + "ln1.hook_scale", scale)
            attn_in = hook(b + "ln1.hook_normalized", attn_in)
        qkv = attn_in.reshape(S, N, d) @ qkv_weights(params, b)  # (S,N,3*H*dh)
        if cfg.qkv_bias:
            qkv += np.stack([params[b + f"attn.b_{w}"] for w in "QKV"], 1).reshape(S, 1, -1)
        qkv = qkv.reshape(S, B, T, 3, H, dh)
        q, k, v = [
            hook(b + f"attn.hook_{w}", qkv[:, :, :, i]).transpose(0, 1, 3, 2, 4)
            for i, w in enumerate("qkv")
        ]  # (S,B,H,T,dh)
        if rows is not None:  # the queries the loss reads; their keys and values are all kept
            q, mask = q[:, :, :, rows], mask[rows]
        name = b + "attn.hook_attn_scores"
        scores, pattern = attention_pattern(
            q @ k.swapaxes(-1, -2),
            mask,
            math.sqrt(dh),
            (lambda x: hooks[name](x, name)) if hooks and name in hooks else None,
        )
        cache[name] = scores  # (S,B,H,T,T)
        pattern = hook(b + "attn.hook_pattern", pattern)
        # pattern @ v written in the (S,B,T,H,dh) layout, so that the heads' concatenation
        # below is a view, not a copy
        z = np.empty((S, B, pattern.shape[3], H, dh), pattern.dtype)
        np.matmul(pattern, v, out=z.transpose(0, 1, 3, 2, 4))
        z = hook(b + "attn.hook_z", z)  # (S,B,T,H,dh)
        attn_out = z.reshape(S, -1, H * dh)
        if rows is not None:
            resid = resid[:, :, rows]
        if cfg.attn_out:
            attn_out = attn_out @ params[b + "attn.W_O"].reshape(S, H * dh, d)
        if cfg.attn_out_bias:
            attn_out += params[b + "attn.b_O"][:, None]
        attn_out = hook(b + "hook_attn_out", attn_out.reshape(S, B, -1, d))
        if cfg.attn_only:
            resid = hook(b + "hook_resid_post", resid + attn_out)
            continue
        resid = hook(b + "hook_resid_mid", resid + attn_out)  # z = e + Attn(e)
        mlp_in = resid
        if cfg.normalization == "pre_ln":
            scale, x_hat, mlp_in = layer_norm(resid, params[b + "ln2.w"], params[b + "ln2.b"])
            cache["_" + b + "ln2.x_hat"] = x_hat
            hook(b + "ln2.hook_scale", scale)
            mlp_in = hook(b + "ln2.hook_normalized", mlp_in)
        pre = mlp_in.reshape(S, -1, d) @ params[b + "mlp.W_in"]
        pre += params[b + "mlp.b_in"][:, None]
        pre = hook(b + "mlp.hook_pre", pre.reshape(S, B, -1, cfg.d_mlp))
        if cfg.act_fn == "relu":
            post = np.maximum(pre, 0.0)
        elif cfg.act_fn == "gelu_erf":
            post = gelu_erf(pre)
        else:
            post, cache["_" + b + "mlp.tanh"] = gelu(pre)
        post = hook(b + "mlp.hook_post", post)
        mlp_out = post.reshape(S, -1, cfg.d_mlp) @ params[b + "mlp.W_out"]
        mlp_out += params[b + "mlp.b_out"][:, None]
        mlp_out = hook(b + "hook_mlp_out", mlp_out.reshape(S, B, -1, d))
        resid = hook(b + "hook_resid_post", resid + mlp_out)  # h = z + FFN(z)
    if cfg.ln_final:
        scale, x_hat, resid = layer_norm(resid, params["ln_final.w"], params["ln_final.b"])
        cache["_ln_final.x_hat"] = x_hat
        hook("ln_final.hook_scale", scale)
        resid = hook("ln_final.hook_normalized", resid)
    logits = resid.reshape(S, -1, d) @ params["unembed.W_U"]
    if cfg.unembed_bias:
        logits += params["unembed.b_U"][:, None]
    return logits.reshape(S, B, -1, cfg.vocab_out), cache


def mlp_backward(params: Params, cache: dict, dresid: np.ndarray, grads: Params, b: str):
    """Gradient through block `b`'s MLP, h = z + W_out act(W_in ln2(z) + b_in) + b_out: returns
    dloss/dz (S, N, d) and writes the MLP's (and ln2's) parameter gradients into `grads`."""
    cfg = params.cfg
    S, N, d, m = dresid.shape[0], dresid.shape[1], cfg.d_model, cfg.d_mlp
    B, T = cache[b + "hook_resid_mid"].shape[1:3]
    post = cache[b + "mlp.hook_post"].reshape(S, N, m)
    pre = cache[b + "mlp.hook_pre"].reshape(S, N, m)
    # Weight gradients straight into their views of the flat buffer (a matrix product's out=
    # gives the same bits as a copy of its result, without the copy).
    np.matmul(post.swapaxes(1, 2), dresid, out=grads[b + "mlp.W_out"])
    grads[b + "mlp.b_out"][...] = dresid.sum(1)
    dpre = dresid @ params[b + "mlp.W_out"].swapaxes(1, 2)  # dloss/dpost
    if cfg.act_fn == "relu":
        dpre *= pre > 0
    elif cfg.act_fn == "gelu_erf":
        dpre *= gelu_erf_grad(pre)
    else:
        gelu_backward(dpre, pre, cache["_" + b + "mlp.tanh"])
    mlp_in = (
        cache[b + "ln2.hook_normalized"]
        if cfg.normalization == "pre_ln"
        else cache[b + "hook_resid_mid"]
    ).reshape(S, N, d)
    np.matmul(mlp_in.swapaxes(1, 2), dpre, out=grads[b + "mlp.W_in"])
    grads[b + "mlp.b_in"][...] = dpre.sum(1)
    dmlp_in = dpre @ params[b + "mlp.W_in"].swapaxes(1, 2)
    if cfg.normalization == "pre_ln":
        dmlp_in = layer_norm_backward(
            dmlp_in.reshape(S, B, T, d),
            cache["_" + b + "ln2.x_hat"],
            cache[b + "ln2.hook_scale"],
            params[b + "ln2.w"],
            grads,
            b + "ln2",
        ).reshape(S, N, d)
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
    last = (
        "ln_final.hook_normalized" if cfg.ln_final else f"blocks.{cfg.n_layers - 1}.hook_resid_post"
    )
    np.matmul(cache[last].reshape(S, -1, d).swapaxes(1, 2), dlogits, out=grads["unembed.W_U"])
    if cfg.unembed_bias:
        grads["unembed.b_U"][...] = dlogits.sum(1)
    dresid = dlogits @ params["unembed.W_U"].swapaxes(1, 2)  # (S,N,d)
    if cfg.ln_final:
        dresid = layer_norm_backward(
            dresid.reshape(S, B, -1, d),
            cache["_ln_final.x_hat"],
            cache["ln_final.hook_scale"],
            params["ln_final.w"],
            grads,
            "ln_final",
        ).reshape(S, -1, d)
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
            np.matmul(z_flat.swapaxes(1, 2), dresid, out=grads[b + "attn.W_O"].reshape(S, -1, d))
            dz = dresid @ W_O.swapaxes(1, 2)
        if cfg.attn_out_bias:
            grads[b + "attn.b_O"][...] = dresid.sum(1)
        dz = dz.reshape(S, B, -1, H, dh).transpose(0, 1, 3, 2, 4)  # (S,B,H,T,dh)
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
        attn_in = (
            cache[b + "ln1.hook_normalized"]
            if cfg.normalization == "pre_ln"
            else cache[b + "hook_resid_pre"]
        ).reshape(S, N, d)
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
                dattn_in.reshape(S, B, T, d),
                cache["_" + b + "ln1.x_hat"],
                cache[b + "ln1.hook_scale"],
                params[b + "ln1.w"],
                grads,
                b + "ln1",
            ).reshape(S, N, d)
        if rows is not None:  # the residual stream after attention was kept at those rows only
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
    total = np.maximum(weights.sum((1, 2)), 1.0)  # (S,)
    loss = (nll * weights).sum((1, 2)) / total
    dlogits = exp
    dlogits /= sumexp
    rows = dlogits.reshape(-1, logits.shape[-1])  # softmax - onehot: one per row
    rows[np.arange(len(rows)), targets.ravel()] -= 1.0
    dlogits *= (weights / total[:, None, None])[..., None]
    return loss, dlogits
