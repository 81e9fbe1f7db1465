"""Linear maps and LayerNorm over feature-major activations (features, N), forward and
backward: the products every layer is made of, written so that each loop runs along the N
positions (in vector lanes). A weight is read in place from one seed's parameter vector p at
an offset (`layout`), so no tensor is ever copied out."""

from __future__ import annotations

import math

from ...config import LN_EPS
from .intrinsics import EXACT, FAST, INNER, njit


@njit(**FAST, **INNER)
def dot(a, b):
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i] * b[i]
    return acc


@njit(**FAST, **INNER)
def total(a):
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i]
    return acc


@njit(**EXACT, inline="always")
def no_rows(x):
    """x's view with no rows: linear's base for sums from 0, linear_back_x's mask for none.
    A view, not a global empty array: numba makes a global read-only, another argument type,
    and so another compile of every kernel it is passed to."""
    return x[:0]


@njit(**EXACT, **INNER)
def linear(p, w, n_in, n_out, x, out, col0, stride, base, bias, relu):
    """out[col0 + o] = base[col0 + o] + sum_i W[i, o] x[i] + b[o] over positions, after a
    ReLU with `relu`: W[i, o] at p[w + i * stride + o] (stride lets one head's block of W_Q
    be read in place), b[o] at p[bias + o] (bias -1: none), base no_rows(out) for 0. Two inputs
    per pass over the row (an odd one alone in the first, plus 0 x[0]), the first pass
    assigning where there is no base, the bias and ReLU in the last: at these sizes a pass
    costs more than its arithmetic. Rows are indexed, not taken as views (arrays handed to
    a helper per row cost reference counting that outweighed the pass)."""
    N = x.shape[1]
    has_base = base.shape[0] > 0
    for o in range(n_out):
        r = col0 + o
        if has_base:
            for n in range(N):
                out[r, n] = base[r, n]
        b = p[bias + o] if bias >= 0 else 0.0
        i = 0
        while i < n_in:  # a pass over inputs i and j
            j = i + 1 if i > 0 or n_in % 2 == 0 else i
            c0 = p[w + i * stride + o]
            c1 = p[w + j * stride + o] if j > i else 0.0
            last = j + 1 == n_in  # the bias (and ReLU) in the last pass only: adding
            if i == 0 and not has_base:  # 0.0 in the others made a product 5% slower
                if relu and last:
                    for n in range(N):
                        a = (c0 * x[i, n] + c1 * x[j, n]) + b
                        out[r, n] = a if a > 0.0 else 0.0
                elif last:
                    for n in range(N):
                        out[r, n] = (c0 * x[i, n] + c1 * x[j, n]) + b
                else:
                    for n in range(N):
                        out[r, n] = c0 * x[i, n] + c1 * x[j, n]
            elif relu and last:
                for n in range(N):
                    a = ((out[r, n] + c0 * x[i, n]) + c1 * x[j, n]) + b
                    out[r, n] = a if a > 0.0 else 0.0
            elif last:
                for n in range(N):
                    out[r, n] = ((out[r, n] + c0 * x[i, n]) + c1 * x[j, n]) + b
            else:
                for n in range(N):
                    out[r, n] = (out[r, n] + c0 * x[i, n]) + c1 * x[j, n]
            i = j + 1


@njit(**EXACT, **INNER)
def linear_back_x(p, w, n_in, n_out, dout, col0, stride, dx, relu_of, first):
    """dx[i] += sum_o W[i, o] dout[col0 + o] (with `first`: dx[i] = the sum), kept only
    where relu_of[i] > 0 (relu_of no_rows(dx): everywhere). Two outputs per pass over the row
    (an odd one alone in the first, as in `linear`), the mask in the last."""
    N = dout.shape[1]
    mask = relu_of.shape[0] > 0
    for i in range(n_in):
        o = 0
        while o < n_out:  # a pass over outputs o and q
            q = o + 1 if o > 0 or n_out % 2 == 0 else o
            c0 = p[w + i * stride + o]
            c1 = p[w + i * stride + q] if q > o else 0.0
            masked = mask and q + 1 == n_out
            if o == 0 and first:
                if masked:
                    for n in range(N):
                        a = c0 * dout[col0 + o, n] + c1 * dout[col0 + q, n]
                        dx[i, n] = a if relu_of[i, n] > 0.0 else 0.0
                else:
                    for n in range(N):
                        dx[i, n] = c0 * dout[col0 + o, n] + c1 * dout[col0 + q, n]
            elif masked:
                for n in range(N):
                    a = (dx[i, n] + c0 * dout[col0 + o, n]) + c1 * dout[col0 + q, n]
                    dx[i, n] = a if relu_of[i, n] > 0.0 else 0.0
            else:
                for n in range(N):
                    dx[i, n] = (dx[i, n] + c0 * dout[col0 + o, n]) + c1 * dout[col0 + q, n]
            o = q + 1


@njit(**FAST, **INNER)
def linear_back_w(g, w, n_in, n_out, x, dout, col0, stride, bias):
    """dW[i, o] = sum_n x[i, n] dout[col0 + o, n], and with bias >= 0 db[o] = sum_n
    dout[col0 + o, n] at g[bias + o]: two inputs and the bias sum in one pass over the
    rows (reductions that reassociate, so that they vectorize)."""
    N = x.shape[1]
    i = n_in % 2
    if i:
        for o in range(n_out):
            acc, acc_b = 0.0, 0.0
            for n in range(N):
                acc += x[0, n] * dout[col0 + o, n]
                acc_b += dout[col0 + o, n]
            g[w + o] = acc
            if bias >= 0:
                g[bias + o] = acc_b
    for i in range(i, n_in, 2):
        for o in range(n_out):
            acc0, acc1, acc_b = 0.0, 0.0, 0.0
            for n in range(N):
                acc0 += x[i, n] * dout[col0 + o, n]
                acc1 += x[i + 1, n] * dout[col0 + o, n]
                acc_b += dout[col0 + o, n]
            g[w + i * stride + o] = acc0
            g[w + (i + 1) * stride + o] = acc1
            if bias >= 0 and i == 0:
                g[bias + o] = acc_b


@njit(**EXACT, **INNER)
def copy(x, out):
    """out[:] = x for 2-D arrays, in a loop: numba's slice assignment allocates a temporary
    when the two might overlap, which costs more than the copy at these sizes."""
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = x[i, j]


@njit(**EXACT, **INNER)
def add_to(out, x):
    """out += x for 2-D arrays, in place."""
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] += x[i, j]


@njit(**EXACT, **INNER)
def layer_norm(p, w, b, x, xhat, scale, out):
    """TransformerLens's LayerNorm over the feature axis of x (d, N)."""
    d, N = x.shape
    for n in range(N):
        mean = 0.0
        for i in range(d):
            mean += x[i, n]
        mean /= d
        var = 0.0
        for i in range(d):
            c = x[i, n] - mean
            xhat[i, n] = c
            var += c * c
        scale[n] = math.sqrt(var / d + LN_EPS)
    for i in range(d):
        for n in range(N):
            xhat[i, n] /= scale[n]
            out[i, n] = xhat[i, n] * p[w + i] + p[b + i]


@njit(**EXACT, **INNER)
def layer_norm_back(p, g, w, b, dy, xhat, scale, dx):
    """dx = the gradient through LayerNorm of dy (d, N); writes gain and bias gradients."""
    d, N = dy.shape
    for i in range(d):
        g[w + i] = dot(dy[i], xhat[i])
        g[b + i] = total(dy[i])
    for n in range(N):
        m1 = 0.0
        m2 = 0.0
        for i in range(d):
            dxh = dy[i, n] * p[w + i]
            m1 += dxh
            m2 += dxh * xhat[i, n]
        m1 /= d
        m2 /= d
        for i in range(d):
            dx[i, n] = (dy[i, n] * p[w + i] - m1 - xhat[i, n] * m2) / scale[n]
