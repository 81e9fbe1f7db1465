"""The float32 engine's elementwise work, compiled: GELU, LayerNorm and the attention softmax,
forward and backward, one pass over memory each where NumPy makes 5-10 (measured on the
436k-parameter model: these passes were a third of a float32 step, its matrix products the
rest). They form a components.Kit (KIT), which model.py hands the components in float32 when
numba is installed (importing this module on the first: numba takes 0.3 s to import); float64,
the reference, runs the components' own NumPy.

Same formulas as components.py, in float32 (the sums over a row, too, as NumPy's), but: e^x is
computed here (a polynomial the compiler runs in vector lanes; a call to the C library's expf
cannot be), GELU's tanh(u) as 2 / (1 + e^(-2u)) - 1, and LayerNorm's gain and bias gradients,
sums over thousands of rows, are summed in float64. Held to float32's tolerance against the
float64 reference in tests (test_fused.py), like the rest of float32.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# FAST lets sums over a row reassociate (so that they run in vector lanes); `exp` stays out of
# such functions: its range reduction is written for the order it is given in.
from ..config import GELU_C, LN_EPS
from .components import Kit
from .kernels import EXACT, FAST, as_float, fma

F = np.float32
LOG2E, LN2_HI, LN2_LO = F(1.4426950408889634), F(0.693359375), F(-2.12194440e-4)
LO, HI = F(-87.0), F(88.0)  # e^x is a normal float32 in between
ONE, HALF = F(1.0), F(0.5)


@njit(inline="always", **EXACT)
def exp(x):
    """e^x in float32 within one unit in the last place (tested): x = k ln 2 + r, |r| <= ln 2 / 2,
    e^r by its Taylor series to r^7 (the next term is below 2^-27) in Horner's scheme
    of fused multiply-adds, 2^k from the exponent bits. 0 below -87, inf above 88, NaN stays NaN."""
    y = min(max(x, LO), HI)
    k = np.floor(y * LOG2E + HALF)
    r = fma(-k, LN2_LO, fma(-k, LN2_HI, y))
    e = fma(fma(fma(F(1 / 5040), r, F(1 / 720)), r, F(1 / 120)), r, F(1 / 24))
    e = fma(fma(fma(fma(e, r, F(1 / 6)), r, HALF), r, ONE), r, ONE)
    e = e * as_float(np.int32((np.int32(k) + 127) << 23))
    return e if LO <= x <= HI else (F(0.0) if x < LO else (F(np.inf) if x > HI else x))


A, B = F(-2.0 * GELU_C), F(-2.0 * GELU_C * 0.044715)
C, D = F(GELU_C), F(3.0 * 0.044715 * GELU_C)


@njit(**EXACT)
def gelu_kernel(pre, post, t):
    """post = 0.5 x (1 + t) = x s with t = tanh(u), u = c (x + 0.044715 x^3), computed as
    s = (1 + t) / 2 = 1 / (1 + e^(-2u)); t = 2 s - 1 is kept for the backward pass (reading
    it back costs less than computing it again)."""
    for i in range(pre.shape[0]):
        x = pre[i]
        s = ONE / (ONE + exp(fma(B * x, x, A) * x))
        t[i] = (s + s) - ONE
        post[i] = x * s


@njit(**EXACT)
def gelu_back_kernel(dpost, pre, t):
    """components.gelu_backward: dpost times 0.5 (1 + t) (1 + x (1 - t) c (1 + 3 * 0.044715 x^2)),
    in place."""
    for i in range(pre.shape[0]):
        x, h = pre[i], t[i]
        dpost[i] *= fma(fma(D * x, x, C) * x, ONE - h, ONE) * fma(HALF, h, HALF)


@njit(**FAST)
def layer_norm_kernel(x, w, b, scale, xhat, out):
    """components.layer_norm over rows of d: x, xhat, out (S, R, d), scale (S, R), w, b (S, d)."""
    S, R, d = x.shape
    for s in range(S):
        for r in range(R):
            mean = F(0.0)
            for i in range(d):
                mean += x[s, r, i]
            mean /= F(d)
            var = F(0.0)
            for i in range(d):
                c = x[s, r, i] - mean
                xhat[s, r, i] = c
                var += c * c
            sc = np.sqrt(var / F(d) + F(LN_EPS))
            scale[s, r] = sc
            for i in range(d):
                xh = xhat[s, r, i] / sc
                xhat[s, r, i] = xh
                out[s, r, i] = xh * w[s, i] + b[s, i]


@njit(**FAST)
def layer_norm_back_kernel(dy, xhat, scale, w, dx, gw, gb):
    """components.layer_norm_backward: dx (S, R, d) from dy, and the gain and bias gradients gw,
    gb (S, d), summed over the rows in float64 (R is thousands of rows)."""
    S, R, d = dy.shape
    acc_w, acc_b = np.zeros(d), np.zeros(d)
    for s in range(S):
        acc_w[:] = 0.0
        acc_b[:] = 0.0
        for r in range(R):
            m1, m2 = F(0.0), F(0.0)
            for i in range(d):
                g = dy[s, r, i]
                gx = g * xhat[s, r, i]
                acc_w[i] += gx
                acc_b[i] += g
                m1 += g * w[s, i]
                m2 += gx * w[s, i]
            m1 /= F(d)
            m2 /= F(d)
            for i in range(d):
                dx[s, r, i] = (dy[s, r, i] * w[s, i] - m1 - xhat[s, r, i] * m2) / scale[s, r]
        for i in range(d):
            gw[s, i] = acc_w[i]
            gb[s, i] = acc_b[i]


# The row's largest entry and sum as functions of their own, so that they run in vector
# lanes (their own flags: a maximum taken in any order, NaN aside) while the softmax
# around them does not reassociate.
@njit(fastmath={"reassoc", "nnan", "nsz"}, **EXACT)
def row_max(x, r):
    top = x[r, 0]
    for i in range(1, x.shape[1]):
        top = max(top, x[r, i])
    return top


@njit(**FAST)
def row_sum(x, r):
    total = F(0.0)
    for i in range(x.shape[1]):
        total += x[r, i]
    return total


@njit(**EXACT)
def softmax_kernel(x):
    """Each row of x (R, T) replaced by its softmax (-inf entries give 0, a NaN makes the
    row NaN)."""
    R, T = x.shape
    for r in range(R):
        top = row_max(x, r)
        for i in range(T):
            x[r, i] = exp(x[r, i] - top)
        total = row_sum(x, r)
        for i in range(T):
            x[r, i] /= total


@njit(**FAST)
def softmax_back_kernel(dp, p, divisor):
    """dp (R, T), dloss/dpattern, replaced by dloss/dscores: p (dp - sum(dp p)) / divisor
    per row."""
    R, T = dp.shape
    for r in range(R):
        mix = F(0.0)
        for i in range(T):
            mix += dp[r, i] * p[r, i]
        for i in range(T):
            dp[r, i] = (dp[r, i] - mix) * p[r, i] / divisor


# The kit: components.py's signatures over these kernels. Arrays the kernels read or write go
# in C-contiguous (a copy where a hook handed over a strided view); results written in place
# come back as the return value.


def gelu(pre):
    pre = np.ascontiguousarray(pre)
    post, t = np.empty_like(pre), np.empty_like(pre)
    gelu_kernel(pre.reshape(-1), post.reshape(-1), t.reshape(-1))
    return post, t


def gelu_backward(dpost, pre, t):
    dpost, pre, t = (np.ascontiguousarray(a) for a in (dpost, pre, t))
    gelu_back_kernel(dpost.reshape(-1), pre.reshape(-1), t.reshape(-1))
    return dpost


def layer_norm(x, w, b):
    """x (S, ..., d), w and b (S, 1, ..., 1, d): one gain and bias per seed."""
    x = np.ascontiguousarray(x)
    S, d = x.shape[0], x.shape[-1]
    xhat, out = np.empty_like(x), np.empty_like(x)
    scale = np.empty((*x.shape[:-1], 1), x.dtype)
    layer_norm_kernel(
        x.reshape(S, -1, d),
        np.ascontiguousarray(w).reshape(S, d),
        np.ascontiguousarray(b).reshape(S, d),
        scale.reshape(S, -1),
        xhat.reshape(S, -1, d),
        out.reshape(S, -1, d),
    )
    return out, xhat, scale


def layer_norm_backward(dy, xhat, scale, w):
    dy, xhat, scale = (np.ascontiguousarray(a) for a in (dy, xhat, scale))
    S, d = dy.shape[0], dy.shape[-1]
    dx, gw, gb = np.empty_like(dy), np.empty(w.shape, dy.dtype), np.empty(w.shape, dy.dtype)
    layer_norm_back_kernel(
        dy.reshape(S, -1, d),
        xhat.reshape(S, -1, d),
        scale.reshape(S, -1),
        np.ascontiguousarray(w).reshape(S, d),
        dx.reshape(S, -1, d),
        gw.reshape(S, d),
        gb.reshape(S, d),
    )
    return dx, gw, gb


def softmax(x):
    x = np.ascontiguousarray(x)
    softmax_kernel(x.reshape(-1, x.shape[-1]))
    return x


def softmax_backward(dp, p, divisor: float):
    dp, p = np.ascontiguousarray(dp), np.ascontiguousarray(p)
    softmax_back_kernel(dp.reshape(-1, dp.shape[-1]), p.reshape(-1, p.shape[-1]), F(divisor))
    return dp


KIT = Kit(layer_norm, layer_norm_backward, softmax, softmax_backward, gelu, gelu_backward)
