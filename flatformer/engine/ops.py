"""The layers' elementwise pieces and their backward passes, on arrays with a leading seed axis:
LayerNorm, the GELUs, the attention softmax, the causal mask, and the row reductions they share.
float32 arrays take the compiled versions in fused.py where numba is installed; float64, the
reference, stays NumPy.

Shapes in comments: S seeds, B sequences, T positions, d d_model.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..config import GELU_C, LN_EPS, ModelConfig


@lru_cache(maxsize=None)
def _fused():
    try:
        from . import fused
    except ImportError:  # numba missing: NumPy does it all
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
    if x.shape[-1] <= 16:  # a loop over the columns
        out = x[..., 0].copy()
        for i in range(1, x.shape[-1]):
            np.maximum(out, x[..., i], out=out)
        return out[..., None]
    if x.dtype == np.float64:  # longer rows: NumPy's reduction, in float64 ...
        return x.max(-1, keepdims=True)
    while x.shape[-1] > 1:  # ... in float32 (measured 1.3-3x faster) halving them
        n = x.shape[-1]
        half = (n + 1) // 2
        x = np.maximum(x[..., :half], x[..., n - half :])
    return x


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
        yield [f[i : i + BLOCK] for f in flats]


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


_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x):
    """The error function, elementwise: the C library's erf (Python's math.erf) on every entry,
    exact to the last bit, but dear (160 ns an entry, 34x np.tanh): the exact GELU serves
    imported models, which are not trained here."""
    x = np.asarray(x)
    return _erf(x).astype(x.dtype if x.dtype.kind == "f" else np.float64)


def gelu_erf(pre):
    """The exact GELU, x (1 + erf(x / sqrt 2)) / 2 (PyTorch's nn.GELU())."""
    return 0.5 * pre * (1.0 + erf(pre * (1.0 / math.sqrt(2.0))))


def gelu_erf_grad(pre):
    """d gelu_erf / d pre = Phi(x) + x phi(x), with Phi, phi the normal cdf and density."""
    pdf = np.exp(-0.5 * pre * pre) * (1.0 / math.sqrt(2.0 * math.pi))
    return 0.5 * (1.0 + erf(pre * (1.0 / math.sqrt(2.0)))) + pre * pdf


def activation(cfg: ModelConfig, pre):
    if cfg.act_fn == "relu":
        return np.maximum(pre, 0.0)
    if cfg.act_fn == "gelu_erf":
        return gelu_erf(pre)
    return gelu(pre)[0]


def activation_grad(cfg: ModelConfig, pre):
    """d activation / d pre, elementwise."""
    if cfg.act_fn == "relu":
        return (pre > 0).astype(pre.dtype)
    if cfg.act_fn == "gelu_erf":
        return gelu_erf_grad(pre)
    return gelu_backward(np.ones(np.shape(pre), np.result_type(pre)), pre, gelu(pre)[1])


def softmax(x):
    """The softmax over the last axis of x, in place (-inf entries give 0)."""
    if fused := fused_for(x):
        return fused.softmax(x)
    x -= row_max(x)
    np.exp(x, out=x)
    x /= row_sum(x)
    return x


def attention_pattern(scores, mask, divisor: float, hook=None):
    """The attention pattern from raw scores q k^T: the scores are divided by `divisor` and
    masked in place (`hook(scores)`, if given, may replace them), then masked again, should a
    hook have unmasked them, and softmaxed. Returns (scores, pattern). Without a hook, float32
    takes one compiled pass for all of it (fused.py; the same bits as these passes)."""
    if hook is None and mask.flags.c_contiguous and (fused := fused_for(scores, mask)):
        return fused.attention_pattern(scores, mask, divisor)
    scores /= divisor
    scores += mask
    if hook is not None:
        scores = hook(scores)
    return scores, softmax(scores + mask)


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


def layer_norm_backward(dy, xhat, scale, w, grads, name: str):
    """Gradient through LayerNorm, (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) / scale with
    dxhat = dy w; writes the gain and bias gradients into `grads`."""
    if fused := fused_for(dy, xhat, scale, w):
        return fused.layer_norm_backward(dy, xhat, scale, w, grads[name + ".w"], grads[name + ".b"])
    S, d = dy.shape[0], dy.shape[-1]
    rows = (*dy.shape[:-1], 1)
    dy_xhat = dy * xhat
    grads[name + ".w"][...] = dy_xhat.reshape(S, -1, d).sum(1)
    grads[name + ".b"][...] = dy.reshape(S, -1, d).sum(1)
    # Both means are products with the gain: mean(dy w) = dy . w / d, mean(dy w xhat) likewise.
    w_mean = w[:, :, None] / d  # (S, d, 1)
    mean_dxhat = (dy.reshape(S, -1, d) @ w_mean).reshape(rows)
    mean_dxhat_xhat = (dy_xhat.reshape(S, -1, d) @ w_mean).reshape(rows)
    dx = dy * w[:, None, None]
    dx -= mean_dxhat
    dx -= np.multiply(xhat, mean_dxhat_xhat, out=dy_xhat)
    dx /= scale
    return dx
