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

from ..config import LN_EPS, ModelConfig, attn_weight
from ..errors import FlatformerError
from .components import (
    REFERENCE,
    Kit,
    attention,
    attention_backward,
    causal_bias,
    embed,
    embed_backward,
    gated_mlp,
    gated_mlp_backward,
    layer_norm,
    linear,
    linear_backward,
    local_bias,
    mlp,
    mlp_backward,
    pos_embed,
    pos_embed_backward,
    repeat_kv,
    repeat_kv_backward,
    rms_norm,
    rms_norm_backward,
    rotary,
    rotary_backward,
    rotary_tables,
    solu_mlp,
    solu_mlp_backward,
    sum_to,
    weight_grad,
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
    names = ["hook_embed"] if cfg.rotary else ["hook_embed", "hook_pos_embed"]
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        names.append(b + "hook_resid_pre")
        if cfg.pre_norm:
            names += [b + "ln1.hook_scale", b + "ln1.hook_normalized"]
        names += [b + f"attn.hook_{n}" for n in ("q", "k", "v")]
        if cfg.rotary:
            names += [b + "attn.hook_rot_q", b + "attn.hook_rot_k"]
        names += [b + f"attn.hook_{n}" for n in ("attn_scores", "pattern", "z")]
        names.append(b + "hook_attn_out")
        if not cfg.attn_only:
            if not cfg.parallel_attn_mlp:
                names.append(b + "hook_resid_mid")
            if cfg.pre_norm:
                names += [b + "ln2.hook_scale", b + "ln2.hook_normalized"]
            mlp_hooks = ("pre", "pre_linear", "post") if cfg.gated_mlp else ("pre", "post")
            if cfg.act_fn == "solu_ln":
                mlp_hooks = ("pre", "mid", "ln.hook_scale", "ln.hook_normalized", "post")
            names += [b + "mlp." + ("" if "." in n else "hook_") + n for n in mlp_hooks]
            names.append(b + "hook_mlp_out")
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
        """LayerNorm (or RMSNorm) `name` on the stream x (S, B, T, d), its two activations
        hooked."""
        w = params[name + ".w"][:, None, None]
        if cfg.norm_kind == "rms":
            out, x_hat, scale = rms_norm(x, w, cfg.eps)
        elif cfg.eps == LN_EPS:
            out, x_hat, scale = kit.layer_norm(x, w, params[name + ".b"][:, None, None])
        else:
            out, x_hat, scale = layer_norm(x, w, params[name + ".b"][:, None, None], cfg.eps)
        cache["_" + name + ".x_hat"] = x_hat
        hook(name + ".hook_scale", scale)
        return hook(name + ".hook_normalized", out)

    cache["_tokens"] = tokens
    x = hook("hook_embed", embed(params["embed.W_E"], tokens))
    if cfg.rotary:  # positions enter as q and k's rotation
        resid = x
        cos, sin = position_tables(cfg, T, params.flat.dtype)
    else:
        p = hook("hook_pos_embed", pos_embed(params["pos_embed.W_pos"], tokens))
        # shortformer: positions enter q and k's inputs only, not the stream
        resid = x if cfg.shortformer else x + p  # e = x + p
    Hkv = cfg.n_kv_heads
    if read is not None:
        cache["_read"] = read
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        rows = read if read is not None and layer == cfg.n_layers - 1 else None
        mask = attention_bias(cfg, T, params.flat.dtype, layer=layer)
        resid = hook(b + "hook_resid_pre", resid)
        attn_in = norm(resid, b + "ln1") if cfg.pre_norm else resid
        W_qkv = qkv_weights(params, b)
        qkv = linear(attn_in.reshape(S, N, d), W_qkv, qkv_biases(params, b))
        if cfg.shortformer:  # q and k read ln1(stream) + p: p W added to their columns
            qk = (H + Hkv) * dh  # p as hook_pos_embed left it (a hook may switch it off)
            qkv = qkv.reshape(S, B, T, -1)
            qkv[..., :qk] += linear(p, W_qkv[:, None, :, :qk])
        q, k, v = [
            hook(b + f"attn.hook_{w}", t)
            for w, t in zip("qkv", split_qkv(qkv.reshape(S, B, T, -1), H, Hkv, dh))
        ]  # (S,B,T,H,dh), k and v with Hkv heads
        if cfg.rotary:
            q = hook(b + "attn.hook_rot_q", rotary(q, cos, sin, cfg.rotary_adjacent_pairs))
            k = hook(b + "attn.hook_rot_k", rotary(k, cos, sin, cfg.rotary_adjacent_pairs))
        q, k, v = (t.transpose(0, 1, 3, 2, 4) for t in (q, k, v))  # (S,B,H,T,dh)
        k, v = repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv)
        if rows is not None:  # the queries the loss reads; their keys and values are all kept
            q, mask = q[:, :, :, rows], attention_bias(cfg, T, params.flat.dtype, rows, layer)
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
        if cfg.parallel_attn_mlp:  # h = e + Attn(e) + FFN(e)
            mlp_in = norm(resid, b + "ln2") if cfg.pre_norm else resid
            resid = resid + attn_out
        else:
            resid = hook(b + "hook_resid_mid", resid + attn_out)  # z = e + Attn(e)
            mlp_in = norm(resid, b + "ln2") if cfg.pre_norm else resid
        mlp_hooks = hooks_in(b + "mlp.", resid.shape[:3])
        if cfg.gated_mlp:
            mlp_out, (*_, act, saved) = gated_mlp(
                mlp_in.reshape(S, -1, d), *mlp_weights(params, b), cfg.act_fn, mlp_hooks, kit
            )
            cache["_" + b + "mlp.act"] = act
        elif cfg.act_fn == "solu_ln":
            W_in, b_in, W_out, b_out = mlp_weights(params, b)
            mlp_out, (_, softmax_, x_hat, _, _) = solu_mlp(
                mlp_in.reshape(S, -1, d), W_in, b_in, *solu_ln(params, b), W_out, b_out,
                cfg.eps, mlp_hooks,
            )  # fmt: skip
            cache["_" + b + "mlp.softmax"], cache["_" + b + "mlp.x_hat"] = softmax_, x_hat
            saved = None
        else:
            mlp_out, (*_, saved) = mlp(
                mlp_in.reshape(S, -1, d), *mlp_weights(params, b), cfg.act_fn, mlp_hooks, kit
            )
        if saved is not None:  # what the nonlinearity's backward reuses (tanh, sigmoid)
            cache["_" + b + "mlp.tanh"] = saved
        mlp_out = hook(b + "hook_mlp_out", mlp_out.reshape(S, B, -1, d))
        resid = hook(b + "hook_resid_post", resid + mlp_out)  # h = z + FFN(z)
    if cfg.ln_final:
        resid = norm(resid, "ln_final")
    logits = linear(resid.reshape(S, -1, d), params["unembed.W_U"], unembed_bias(params))
    return logits.reshape(S, B, -1, cfg.vocab_out), cache


def attention_bias(cfg: ModelConfig, T: int, dtype, rows=None, layer: int = 0) -> np.ndarray:
    """Added to layer `layer`'s attention scores (T, T), or (P, T) at the query rows `rows`:
    the causal mask's 0 and -inf, a local layer's window of the latest keys, or zeros where
    every query reads every key (causal: false)."""
    if cfg.window(layer):
        mask = local_bias(T, cfg.window(layer), dtype)
    else:
        mask = causal_bias(T, dtype) if cfg.causal else np.zeros((T, T), dtype)
    return mask if rows is None else mask[rows]


def qkv_weights(params: Params, b: str) -> np.ndarray:
    """W_Q, W_K and W_V of block `b` side by side, (S, d, (H + 2 Hkv) dh), each head's columns
    together: one matrix product makes (or differentiates) all three."""
    S, d = params.n_seeds, params.cfg.d_model
    W = [params[b + attn_weight(params.cfg, w)] for w in "QKV"]  # (S,heads,d,dh)
    return np.concatenate([w.transpose(0, 2, 1, 3).reshape(S, d, -1) for w in W], -1)


def qkv_biases(params: Params, b: str) -> np.ndarray | None:
    """b_Q, b_K and b_V of block `b` side by side, (S, 1, (H + 2 Hkv) dh), as qkv_weights;
    None without them."""
    if not params.cfg.qkv_bias:
        return None
    S = params.n_seeds
    bs = [params[b + attn_weight(params.cfg, w, "b")].reshape(S, 1, -1) for w in "QKV"]
    return np.concatenate(bs, -1)


def split_qkv(qkv: np.ndarray, H: int, Hkv: int, dh: int) -> tuple:
    """q (..., H, dh), k and v (..., Hkv, dh): views of the columns qkv_weights made."""
    q, k, v = np.split(qkv, [H * dh, (H + Hkv) * dh], -1)
    lead = qkv.shape[:-1]
    return q.reshape(*lead, H, dh), k.reshape(*lead, Hkv, dh), v.reshape(*lead, Hkv, dh)


def position_tables(cfg: ModelConfig, T: int, dtype) -> tuple:
    """Rotary positions' (cos, sin) for T positions, (T, 1, r): broadcast over the heads of
    q or k (S, B, T, H, dh)."""
    cos, sin = rotary_tables(T, cfg.rotated_dims, float(cfg.rotary_base), cfg.rotary_adjacent_pairs)
    return cos[:, None].astype(dtype), sin[:, None].astype(dtype)


def mlp_weights(params: Params, b: str) -> tuple:
    """([W_gate,] W_in, b_in, W_out, b_out) of block `b`, the biases (S, 1, m) and (S, 1, d);
    W_gate for a gated MLP only."""
    gate = (params[b + "mlp.W_gate"],) if params.cfg.gated_mlp else ()
    return (
        *gate,
        params[b + "mlp.W_in"],
        params[b + "mlp.b_in"][:, None],
        params[b + "mlp.W_out"],
        params[b + "mlp.b_out"][:, None],
    )


def solu_ln(params: Params, b: str) -> tuple:
    """The gain and bias of block `b`'s SoLU LayerNorm, each (S, 1, m)."""
    return params[b + "mlp.ln.w"][:, None], params[b + "mlp.ln.b"][:, None]


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
        """dloss/dx through LayerNorm (or RMSNorm) `name` (dy (S, B, T, d)); its gain and bias
        gradients into `grads`."""
        saved = (cache["_" + name + ".x_hat"], cache[name + ".hook_scale"])
        w = params[name + ".w"][:, None, None]
        if cfg.norm_kind == "rms":
            dx, dw = rms_norm_backward(dy, *saved, w)
        else:
            dx, dw, db = kit.layer_norm_backward(dy, *saved, w)
            grads[name + ".b"][...] = db.reshape(S, d)
        grads[name + ".w"][...] = dw.reshape(S, d)
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
    Hkv = cfg.n_kv_heads
    if cfg.rotary:
        cos, sin = position_tables(cfg, T, params.flat.dtype)
    if cfg.shortformer:
        dW_pos = np.zeros_like(params["pos_embed.W_pos"])
    for layer in reversed(range(cfg.n_layers)):
        b = f"blocks.{layer}."
        rows = read if read is not None and layer == cfg.n_layers - 1 else None
        dpost = dresid  # dloss/d hook_resid_post
        if not cfg.attn_only:  # h = z + FFN(z), or h = e + Attn(e) + FFN(e) in parallel
            pre_ln = cfg.pre_norm
            if pre_ln:
                mlp_in = cache[b + "ln2.hook_normalized"]
            else:
                mlp_in = cache[
                    b + ("hook_resid_pre" if cfg.parallel_attn_mlp else "hook_resid_mid")
                ]
                if rows is not None and cfg.parallel_attn_mlp:
                    mlp_in = mlp_in[:, :, rows]
            saved_act = cache.get("_" + b + "mlp.tanh")
            if cfg.gated_mlp:
                pre, pre_linear, post = (
                    cache[b + f"mlp.hook_{w}"].reshape(S, -1, cfg.d_mlp)
                    for w in ("pre", "pre_linear", "post")
                )
                saved = (pre, pre_linear, post, cache["_" + b + "mlp.act"], saved_act)
                backward_of, names = (
                    gated_mlp_backward,
                    ("W_gate", "W_in", "b_in", "W_out", "b_out"),
                )
            elif cfg.act_fn == "solu_ln":
                pre, post = (
                    cache[b + f"mlp.hook_{w}"].reshape(S, -1, cfg.d_mlp) for w in ("pre", "post")
                )
                scale = cache[b + "mlp.ln.hook_scale"].reshape(S, -1, 1)
                saved = (pre, cache["_" + b + "mlp.softmax"], cache["_" + b + "mlp.x_hat"])
                saved = (*saved, scale, post)
                ln_w, ln_b = solu_ln(params, b)

                def backward_of(dout, x, W_in, b_in, W_out, b_out, act_fn, saved, kit):
                    return solu_mlp_backward(dout, x, W_in, b_in, ln_w, ln_b, W_out, b_out, saved)

                names = ("W_in", "b_in", "ln.w", "ln.b", "W_out", "b_out")
            else:
                pre, post = (
                    cache[b + f"mlp.hook_{w}"].reshape(S, -1, cfg.d_mlp) for w in ("pre", "post")
                )
                saved = (pre, post, saved_act)
                backward_of, names = mlp_backward, ("W_in", "b_in", "W_out", "b_out")
            dmlp_in, weight_grads = backward_of(
                dresid,
                mlp_in.reshape(S, -1, d),
                *mlp_weights(params, b),
                cfg.act_fn,
                saved,
                kit,
            )
            for name, g in zip(names, weight_grads):
                grads[b + "mlp." + name][...] = g.reshape(grads[b + "mlp." + name].shape)
            if pre_ln:
                dmlp_in = norm_backward(dmlp_in.reshape(mlp_in.shape), b + "ln2").reshape(S, -1, d)
            dresid = dresid + dmlp_in
        # z = e + concat_h(attention(q, k, v)) [W_O] [+ b_O]
        dattn_out = dz = dpost if cfg.parallel_attn_mlp else dresid
        if cfg.attn_out:
            z_flat = cache[b + "attn.hook_z"].reshape(S, -1, H * dh)
            dz, dW_O, _ = linear_backward(
                dattn_out, z_flat, params[b + "attn.W_O"].reshape(S, H * dh, d)
            )
            grads[b + "attn.W_O"][...] = dW_O.reshape(S, H, dh, d)
        if cfg.attn_out_bias:
            grads[b + "attn.b_O"][...] = sum_to(dattn_out, (S, 1, d)).reshape(S, d)
        dz = dz.reshape(S, B, -1, H, dh).transpose(0, 1, 3, 2, 4)  # (S,B,H,T,dh)
        used = ("rot_q", "rot_k", "v") if cfg.rotary else ("q", "k", "v")
        q, k, v = (cache[b + f"attn.hook_{w}"].transpose(0, 1, 3, 2, 4) for w in used)
        if rows is not None:
            q = q[:, :, :, rows]
        group = H // Hkv
        k, v = repeat_kv(k, group), repeat_kv(v, group)
        pattern = cache[b + "attn.hook_pattern"]
        bias = attention_bias(cfg, T, pattern.dtype, rows, layer)
        dq, dk, dv = attention_backward(dz, q, k, v, pattern, kit, cfg.attn_coeff, bias)
        dk, dv = repeat_kv_backward(dk, group), repeat_kv_backward(dv, group)
        dq, dk, dv = (t.transpose(0, 1, 3, 2, 4) for t in (dq, dk, dv))  # (S,B,T,heads,dh)
        if cfg.rotary:
            adjacent = cfg.rotary_adjacent_pairs
            q_rows = slice(None) if rows is None else rows
            dq = rotary_backward(dq, cos[q_rows], sin[q_rows], adjacent)
            dk = rotary_backward(dk, cos, sin, adjacent)
        # dq, dk and dv side by side, as q, k and v came out of one product (dq is 0 at
        # queries the loss does not read)
        width = (H + 2 * Hkv) * dh
        dqkv = (np.empty if rows is None else np.zeros)((S, B, T, width), dresid.dtype)
        dqkv[:, :, slice(None) if rows is None else rows, : H * dh] = dq.reshape(S, B, -1, H * dh)
        dqkv[..., H * dh : (H + Hkv) * dh] = dk.reshape(S, B, T, -1)
        dqkv[..., (H + Hkv) * dh :] = dv.reshape(S, B, T, -1)
        attn_in = cache[b + "ln1.hook_normalized" if cfg.pre_norm else b + "hook_resid_pre"]
        attn_in = attn_in.reshape(S, N, d)
        W_qkv = qkv_weights(params, b)
        dattn_in, dW, db = linear_backward(
            dqkv.reshape(S, N, width), attn_in, W_qkv, qkv_biases(params, b)
        )
        if cfg.shortformer:  # q and k's inputs held ln1(stream) + p
            qk = (H + Hkv) * dh
            dqk = dqkv[..., :qk].sum(1)  # (S,T,qk): p is the same in every sequence
            W_pos = params["pos_embed.W_pos"][:, :T]
            dW[..., :qk] += weight_grad(W_pos, dqk, W_qkv[..., :qk])
            dW_pos[:, :T] += dqk @ W_qkv[..., :qk].swapaxes(-1, -2)
        for w, part in zip("QKV", np.split(dW, [H * dh, (H + Hkv) * dh], -1)):
            name = b + attn_weight(cfg, w)
            grads[name][...] = part.reshape(S, d, -1, dh).transpose(0, 2, 1, 3)
        if cfg.qkv_bias:
            for w, part in zip("QKV", np.split(db, [H * dh, (H + Hkv) * dh], -1)):
                name = b + attn_weight(cfg, w, "b")
                grads[name][...] = part.reshape(grads[name].shape)
        if cfg.pre_norm:
            dattn_in = norm_backward(dattn_in.reshape(S, B, T, d), b + "ln1").reshape(S, N, d)
        if rows is not None:  # the residual stream after attention was kept at those rows only
            full = np.zeros((S, B, T, d), dresid.dtype)
            full[:, :, rows] = dresid.reshape(S, B, -1, d)
            dresid = full.reshape(S, N, d)
        dresid = dresid + dattn_in
    dresid = dresid.reshape(S, B, T, d)  # e = x + p
    if cfg.shortformer:
        grads["pos_embed.W_pos"][...] = dW_pos
    elif not cfg.rotary:
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
