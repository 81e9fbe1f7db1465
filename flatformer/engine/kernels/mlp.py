"""The MLP of a block, forward and backward: the general path through `linear`, and the
paper's d_model-2 ReLU MLP in one pass per hidden unit."""

from __future__ import annotations

import math

from ...config import GELU_C
from .intrinsics import EXACT, FAST, INNER, njit
from .tensors import BIN, BOUT, LN2B, LN2W, WIN, WOUT
from .primitives import add_to, layer_norm, layer_norm_back, linear, linear_back_w
from .primitives import linear_back_x, no_rows, total


@njit(**EXACT, **INNER)
def mlp_forward(p, o, gelu, x, h2, s2, m_in, pre, post, out):
    """out = x + W_out act(W_in ln2(x) + b_in) + b_out over the columns of x (d, N)."""
    d, N = x.shape
    m = pre.shape[0]
    y = x
    if o[LN2W] >= 0:
        layer_norm(p, o[LN2W], o[LN2B], x, h2, s2, m_in)
        y = m_in
    if gelu:
        linear(p, o[WIN], d, m, y, pre, 0, m, no_rows(pre), o[BIN], False)
        for c in range(m):
            for n in range(N):
                a = pre[c, n]
                post[c, n] = 0.5 * a * (1.0 + math.tanh(GELU_C * (a + 0.044715 * a * a * a)))
    elif d == 2:  # ReLU at d_model 2 (the paper's): a pass per hidden unit
        relu_mlp_2(p, o, y, x, post, out)
        return
    else:  # ReLU: post > 0 wherever pre > 0, all the backward pass needs of pre
        linear(p, o[WIN], d, m, y, post, 0, m, no_rows(post), o[BIN], True)
    linear(p, o[WOUT], m, d, post, out, 0, d, x, o[BOUT], False)


@njit(**EXACT, **INNER)
def relu_mlp_2(p, o, x, base, post, out):
    """out = base + b_out + W_out relu(W_in x + b_in) at d_model 2 (x, base, out (2, N)),
    one pass over the positions per hidden unit c (its W_in column and W_out row
    together): at d_mlp 32, 33 passes where linear's make 66."""
    N, m = x.shape[1], post.shape[0]
    win, bin_, wout, bout = o[WIN], o[BIN], o[WOUT], o[BOUT]
    for i in range(2):
        b = p[bout + i] if bout >= 0 else 0.0
        for n in range(N):
            out[i, n] = base[i, n] + b
    for c in range(m):
        w0, w1, v0, v1 = p[win + c], p[win + m + c], p[wout + 2 * c], p[wout + 2 * c + 1]
        b = p[bin_ + c] if bin_ >= 0 else 0.0
        for n in range(N):
            a = (w0 * x[0, n] + w1 * x[1, n]) + b
            h = a if a > 0.0 else 0.0
            post[c, n] = h
            out[0, n] += v0 * h
            out[1, n] += v1 * h


@njit(**EXACT, **INNER)
def mlp_back(p, g, o, l, gelu, mid, m_in, h2, s2, pre, post, dres, dmid, dpre):
    """Through block l's MLP, h = z + W_out act(W_in ln2(z) + b_in) + b_out: adds
    dloss/dz to dres and writes the MLP's (and ln2's) parameter gradients."""
    d = dres.shape[0]
    x = m_in[l] if o[LN2W] >= 0 else mid[l]
    if d == 2 and not gelu:
        relu_mlp_2_back(p, g, o, x, post[l], dres, dmid)
    else:
        general_mlp_back(p, g, o, l, gelu, x, pre, post, dres, dmid, dpre)
    if o[LN2W] >= 0:
        layer_norm_back(p, g, o[LN2W], o[LN2B], dmid, h2[l], s2[l], dmid)
    add_to(dres, dmid)


@njit(**EXACT, **INNER)
def general_mlp_back(p, g, o, l, gelu, x, pre, post, dres, dmid, dpre):
    """mlp_back's product passes, from dres to dmid (before ln2) through block l's
    activation (x: the MLP's input)."""
    d, N = dres.shape
    m = dpre.shape[0]
    linear_back_w(g, o[WOUT], m, d, post[l], dres, 0, d, o[BOUT])
    linear_back_x(p, o[WOUT], m, d, dres, 0, d, dpre, no_rows(dpre) if gelu else post[l], True)
    if gelu:
        for c in range(m):
            for n in range(N):
                a = pre[l, c, n]
                th = math.tanh(GELU_C * (a + 0.044715 * a * a * a))
                dpre[c, n] *= 0.5 * (1.0 + th) + 0.5 * a * (1.0 - th * th) * GELU_C * (
                    1.0 + 3.0 * 0.044715 * a * a
                )
    linear_back_w(g, o[WIN], d, m, x, dpre, 0, m, o[BIN])
    linear_back_x(p, o[WIN], d, m, dpre, 0, m, dmid, no_rows(dmid), True)


@njit(**FAST, **INNER)
def relu_mlp_2_back(p, g, o, x, post, dres, dmid):
    """Through relu_mlp_2: dmid = dloss/dx from dres = dloss/dout, and the gradients of
    W_in, b_in, W_out, b_out, one pass per hidden unit c (the four product passes of
    general_mlp_back together, dloss/dpre[c] kept in registers): 32 passes at d_mlp 32
    where they make 128."""
    N, m = x.shape[1], post.shape[0]
    win, bin_, wout, bout = o[WIN], o[BIN], o[WOUT], o[BOUT]
    if bout >= 0:
        g[bout], g[bout + 1] = total(dres[0]), total(dres[1])
    for c in range(m):
        w0, w1, v0, v1 = p[win + c], p[win + m + c], p[wout + 2 * c], p[wout + 2 * c + 1]
        gv0, gv1, gw0, gw1, gb = 0.0, 0.0, 0.0, 0.0, 0.0
        for n in range(N):
            h = post[c, n]
            gv0 += h * dres[0, n]
            gv1 += h * dres[1, n]
            dp = v0 * dres[0, n] + v1 * dres[1, n] if h > 0.0 else 0.0
            gw0 += x[0, n] * dp
            gw1 += x[1, n] * dp
            gb += dp
            dmid[0, n] = w0 * dp + (dmid[0, n] if c else 0.0)
            dmid[1, n] = w1 * dp + (dmid[1, n] if c else 0.0)
        g[wout + 2 * c], g[wout + 2 * c + 1], g[win + c], g[win + m + c] = gv0, gv1, gw0, gw1
        if bin_ >= 0:
            g[bin_ + c] = gb
