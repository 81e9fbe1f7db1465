"""One seed's whole passes: its buffers (`Buffers`, named), the forward pass to the logits (at
every position, or at one position a window), the loss and dloss/dlogits, and the backward
pass to the gradient of every parameter."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from .attention import attention, attention_at, attention_back
from .intrinsics import EXACT, INNER, exp, njit
from .tensors import BQ, LN1B, LN1W, WIN, WO, WQ
from .mlp import mlp_back, mlp_forward
from .primitives import add_to, copy, layer_norm, layer_norm_back, linear, no_rows
from .primitives import linear_back_w, linear_back_x


# One seed's activations and gradients of activations, reused by every step; L layers, N = B * T
# positions, hd = n_heads * d_head, m = d_mlp. A namedtuple: numba compiles its fields' reads
# to the same loads as a plain tuple's, and the kernels name what they read.
Buffers = namedtuple(
    "Buffers",
    [
        "res",  # (L + 1, d, N) the residual stream into each block, and out of the last
        "mid",  # (L, d, N) after each block's attention
        "a_in",  # (L, d, N) attention's input (ln1's output)
        "m_in",  # (L, d, N) the MLP's input (ln2's output)
        "h1",  # (L, d, N) ln1's normalised input
        "s1",  # (L, N) ln1's scale
        "h2",  # (L, d, N) ln2's normalised input
        "s2",  # (L, N) ln2's scale
        "qkv",  # (L, 3, hd, N) queries, keys and values
        "pat",  # (L, H, R, N) attention patterns (see `attention`: R = T, or 2T - 1 both ways)
        "z",  # (L, hd, N) the heads' outputs
        "pre",  # (L, m, N) the MLP's pre-activations
        "post",  # (L, m, N) its activations
        "logits",  # (V, N) the logits (V = d_vocab_out), then dloss/dlogits
        "dres",  # (d, N) dloss/dresidual, from the top down
        "dmid",  # (d, N) dloss/d(after attention)
        "dz",  # (hd, N)
        "dqkv",  # (3, hd, N)
        "dpre",  # (m, N)
        "dpat",  # (R, N) one head's dloss/dpattern (attention_at's scratch too)
        "hf",  # (d, N) ln_final's normalised input
        "sf",  # (N,) ln_final's scale
        "final",  # (d, N) ln_final's output
        "rows",  # (4, N) scratch for the softmaxes; row 3 each position's index in its window
    ],
)


@njit(**EXACT, **INNER)
def buffers(dims, L, B, T):
    """A seed's Buffers for L layers and B windows of T positions."""
    d, H, m, V = dims.d_model, dims.n_heads, dims.d_mlp, dims.d_vocab_out
    N, hd = B * T, dims.n_heads * dims.d_head
    R = T if dims.causal else 2 * T - 1  # the keys' offsets from their query
    rows = np.empty((4, N))
    for n in range(N):
        rows[3, n] = n % T
    return Buffers(
        np.empty((L + 1, d, N)),
        np.empty((L, d, N)),
        np.empty((L, d, N)),
        np.empty((L, d, N)),
        np.empty((L, d, N)),
        np.empty((L, N)),
        np.empty((L, d, N)),
        np.empty((L, N)),
        np.empty((L, 3, hd, N)),
        np.empty((L, H, R, N)),
        np.empty((L, hd, N)),
        np.empty((L, m, N)),
        np.empty((L, m, N)),
        np.empty((V, N)),
        np.empty((d, N)),
        np.empty((d, N)),
        np.empty((hd, N)),
        np.empty((3, hd, N)),
        np.empty((m, N)),
        np.empty((R, N)),
        np.empty((d, N)),
        np.empty(N),
        np.empty((d, N)),
        rows,
    )


@njit(**EXACT, **INNER)
def unembed_forward(p, glob, x, hf, sf, final, logits):
    """logits (V, N) = [ln_final](x) W_U [+ b_U] over the columns of x (d, N)."""
    d, V = x.shape[0], logits.shape[0]
    if glob.ln_final_w >= 0:
        layer_norm(p, glob.ln_final_w, glob.ln_final_b, x, hf, sf, final)
        x = final
    linear(p, glob.W_U, d, V, x, logits, 0, V, no_rows(logits), glob.b_U, False)


@njit(**EXACT, **INNER)
def blocks_forward(p, tok, glob, lay, dims, B, T, bufs, whole):
    """Embedding and every block on tok (B, T); without `whole`, the last block stops
    after its queries, keys and values, at bufs.qkv[L - 1] (the rest is the caller's)."""
    res, mid, a_in, m_in, h1, s1 = bufs.res, bufs.mid, bufs.a_in, bufs.m_in, bufs.h1, bufs.s1
    h2, s2, qkv, pat, z, pre, post = (
        bufs.h2,
        bufs.s2,
        bufs.qkv,
        bufs.pat,
        bufs.z,
        bufs.pre,
        bufs.post,
    )
    d, H, dh, gelu = dims.d_model, dims.n_heads, dims.d_head, dims.gelu
    L, hd = lay.shape[0], dims.n_heads * dims.d_head
    WE, WPOS = glob.W_E, glob.W_pos
    for b in range(B):
        for t in range(T):
            for i in range(d):
                res[0, i, b * T + t] = p[WE + tok[b, t] * d + i] + p[WPOS + t * d + i]
    for l in range(L):
        o = lay[l]
        x = res[l]
        if o[LN1W] >= 0:
            layer_norm(p, o[LN1W], o[LN1B], x, h1[l], s1[l], a_in[l])
            x = a_in[l]
        for r in range(3):
            for h in range(H):
                linear(
                    p,
                    o[WQ + r] + h * d * dh,
                    d,
                    dh,
                    x,
                    qkv[l, r],
                    h * dh,
                    dh,
                    no_rows(qkv[l, r]),
                    o[BQ + r] + h * dh if o[BQ + r] >= 0 else -1,
                    False,
                )
        if l == L - 1 and not whole:
            return
        attention(qkv[l, 0], qkv[l, 1], qkv[l, 2], pat[l], z[l], H, dh, bufs.rows, dims.causal)
        if o[WO] >= 0:
            linear(p, o[WO], hd, d, z[l], mid[l], 0, d, res[l], -1, False)
        else:
            copy(res[l], mid[l])
            add_to(mid[l], z[l])
        if o[WIN] < 0:  # attention-only block
            copy(mid[l], res[l + 1])
        else:
            mlp_forward(p, o, gelu, mid[l], h2[l], s2[l], m_in[l], pre[l], post[l], res[l + 1])


@njit(**EXACT, **INNER)
def forward_seed(p, tok, glob, lay, dims, B, T, bufs):
    """One seed's forward pass on tok (B, T): the logits land in bufs.logits as (V, N)."""
    blocks_forward(p, tok, glob, lay, dims, B, T, bufs, True)
    res = bufs.res[lay.shape[0]]
    unembed_forward(p, glob, res, bufs.hf, bufs.sf, bufs.final, bufs.logits)


@njit(**EXACT, **INNER)
def forward_at(p, tok, at, glob, lay, dims, B, T, bufs, one):
    """The logits at position at[b] of each window b only, into one.logits (V, B): the last
    block reads its queries, and everything after them, at just those positions (its keys
    and values are every position's, so this holds for attention both ways too), in buffers
    `one` for B windows of 1 token. Each column's arithmetic is forward_seed's, so the
    numbers are the same."""
    blocks_forward(p, tok, glob, lay, dims, B, T, bufs, False)
    L, H, dh, gelu = lay.shape[0], dims.n_heads, dims.d_head, dims.gelu
    o, qkv, res = lay[L - 1], bufs.qkv[L - 1], bufs.res[L - 1]
    z, at_res, at_mid, out = one.z[0], one.res[0], one.mid[0], one.res[1]
    attention_at(qkv[0], qkv[1], qkv[2], at, z, T, H, dh, bufs.dpat, bufs.rows, dims.causal)
    for i in range(res.shape[0]):
        for b in range(B):
            at_res[i, b] = res[i, b * T + at[b]]
    if o[WO] >= 0:
        linear(p, o[WO], H * dh, res.shape[0], z, at_mid, 0, res.shape[0], at_res, -1, False)
    else:
        copy(at_res, at_mid)
        add_to(at_mid, z)
    if o[WIN] < 0:
        copy(at_mid, out)
    else:
        mlp_forward(
            p, o, gelu, at_mid, one.h2[0], one.s2[0], one.m_in[0], one.pre[0], one.post[0], out
        )
    unembed_forward(p, glob, out, one.hf, one.sf, one.final, one.logits)


@njit(**EXACT, **INNER)
def softmax_rows(logits, top, norm):
    """Over the columns n of logits (V, N): top[n] its largest entry, logits[:, n]
    overwritten by exp(logits - top), norm[n] their sum (in the order of v, as the NumPy
    engine); every loop runs along the positions, in vector lanes."""
    V = logits.shape[0]
    for n in range(top.shape[0]):
        top[n] = logits[0, n]
    for v in range(1, V):
        for n in range(top.shape[0]):
            top[n] = max(top[n], logits[v, n])
    for n in range(norm.shape[0]):
        norm[n] = 0.0
    for v in range(V):
        for n in range(top.shape[0]):
            e = exp(logits[v, n] - top[n])
            logits[v, n] = e
            norm[n] += e


@njit(**EXACT, **INNER)
def loss_and_dlogits(logits, tgt, wt, B, T, rows):
    """Weighted mean cross-entropy; overwrites the logits (V, N) with dloss/dlogits. rows:
    (3, N) of scratch."""
    V = logits.shape[0]
    weight = 0.0
    for b in range(B):
        for t in range(T):
            weight += wt[b, t]
    weight = max(weight, 1.0)
    top, norm, picked = rows[0], rows[1], rows[2]
    for b in range(B):
        for t in range(T):
            picked[b * T + t] = logits[tgt[b, t], b * T + t]
    softmax_rows(logits, top, norm)
    loss = 0.0
    for b in range(B):
        for t in range(T):
            n = b * T + t
            loss += (math.log(norm[n]) - (picked[n] - top[n])) * wt[b, t]
            picked[n] = wt[b, t] / weight  # now each position's scale,
            norm[n] = picked[n] / norm[n]  # and the factor of its exponentials
    for v in range(V):  # one division a position, not one per logit
        for n in range(B * T):
            logits[v, n] *= norm[n]
    for b in range(B):
        for t in range(T):
            logits[tgt[b, t], b * T + t] -= picked[b * T + t]
    return loss / weight


@njit(**EXACT, **INNER)
def backward_seed(p, g, tok, glob, lay, dims, B, T, bufs):
    """Gradient of the loss into g, given dloss/dlogits in bufs.logits after forward_seed."""
    res, mid, a_in, m_in, h1, s1 = bufs.res, bufs.mid, bufs.a_in, bufs.m_in, bufs.h1, bufs.s1
    h2, s2, qkv, pat, z, pre, post = (
        bufs.h2,
        bufs.s2,
        bufs.qkv,
        bufs.pat,
        bufs.z,
        bufs.pre,
        bufs.post,
    )
    dlogits, dres, dmid, dz, dqkv, dpre = (
        bufs.logits,
        bufs.dres,
        bufs.dmid,
        bufs.dz,
        bufs.dqkv,
        bufs.dpre,
    )
    dpat, hf, sf, final, rows = bufs.dpat, bufs.hf, bufs.sf, bufs.final, bufs.rows
    d, H, dh, V, Vout = dims.d_model, dims.n_heads, dims.d_head, dims.d_vocab, dims.d_vocab_out
    n_ctx, gelu = dims.n_ctx, dims.gelu
    L, hd = lay.shape[0], dims.n_heads * dims.d_head
    WE, WPOS, WU, BU = glob.W_E, glob.W_pos, glob.W_U, glob.b_U
    LNFW, LNFB = glob.ln_final_w, glob.ln_final_b
    linear_back_w(g, WU, d, Vout, final if LNFW >= 0 else res[L], dlogits, 0, Vout, BU)
    linear_back_x(p, WU, d, Vout, dlogits, 0, Vout, dres, no_rows(dres), True)
    if LNFW >= 0:
        layer_norm_back(p, g, LNFW, LNFB, dres, hf, sf, dres)
    for l in range(L - 1, -1, -1):
        o = lay[l]
        if o[WIN] >= 0:  # else an attention-only block
            mlp_back(p, g, o, l, gelu, mid, m_in, h2, s2, pre, post, dres, dmid, dpre)
        # Attention: z = e + concat_h(softmax(q k^T / sqrt(dh)) v) [W_O]
        if o[WO] >= 0:
            linear_back_w(g, o[WO], hd, d, z[l], dres, 0, d, -1)
            linear_back_x(p, o[WO], hd, d, dres, 0, d, dz, no_rows(dz), True)
        else:
            copy(dres, dz)
        attention_back(
            qkv[l, 0],
            qkv[l, 1],
            qkv[l, 2],
            pat[l],
            dz,
            dqkv[0],
            dqkv[1],
            dqkv[2],
            dpat,
            H,
            dh,
            rows,
            dims.causal,
        )
        x = a_in[l] if o[LN1W] >= 0 else res[l]
        for r in range(3):
            for h in range(H):
                linear_back_w(
                    g,
                    o[WQ + r] + h * d * dh,
                    d,
                    dh,
                    x,
                    dqkv[r],
                    h * dh,
                    dh,
                    o[BQ + r] + h * dh if o[BQ + r] >= 0 else -1,
                )
                linear_back_x(
                    p,
                    o[WQ + r] + h * d * dh,
                    d,
                    dh,
                    dqkv[r],
                    h * dh,
                    dh,
                    dmid,
                    no_rows(dmid),
                    r == 0 and h == 0,
                )
        if o[LN1W] >= 0:
            layer_norm_back(p, g, o[LN1W], o[LN1B], dmid, h1[l], s1[l], dmid)
        add_to(dres, dmid)
    for i in range(n_ctx * d):
        g[WPOS + i] = 0.0
    for i in range(V * d):
        g[WE + i] = 0.0
    for b in range(B):
        for t in range(T):
            for i in range(d):
                g[WPOS + t * d + i] += dres[i, b * T + t]
                g[WE + tok[b, t] * d + i] += dres[i, b * T + t]
