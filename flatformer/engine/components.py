"""The transformer's components, each forward beside its hand-written backward, in plain NumPy
that reads like the equations: the embeddings, LayerNorm, attention, the MLP and the
unembedding. This is the one place the math is written in Python; the reference model
(model.py), the edge graph (edges/graph.py) and the readouts compose these functions.

Every function broadcasts over leading axes. Activations are (..., T, d); weights carry the
same leading axes or fewer (model.py's seed axis S, the edge graph's none), so a model, S seeds
trained together or E edge-ablated variants run through the same lines. A backward returns the
gradient of every input it was given; a weight's gradient is summed over the rows that shared
it.

Named activations are hook points: a component calls `hook(name, x)` (TransformerLens's names
within the component: `hook_attn_scores`, `hook_pattern`, `hook_pre`, `hook_post`) and goes on
with what it returns. The caller puts the block in front of the name.

Speed is not written here. The elementwise steps (LayerNorm, the softmax, the tanh GELU and
their backward passes) come as a `Kit`, this module's own by default; the engine passes the
compiled float32 kit (fused.KIT) instead, which computes the same formulas in one pass each.

Shapes in comments: T positions (Tq queries, Tk keys), d d_model, dh d_head, m d_mlp, V d_vocab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from ..config import GELU_C, LN_EPS


def no_hook(name: str, x: np.ndarray) -> np.ndarray:
    return x


def sum_to(g: np.ndarray, shape: tuple) -> np.ndarray:
    """g summed down to `shape` over the axes broadcasting added or stretched: the gradient of
    an input that broadcasting shared among many outputs."""
    lead = g.ndim - len(shape)
    stretched = [lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1]
    return g.sum((*range(lead), *stretched), keepdims=True).reshape(shape)


# ---- linear maps: y = x W + b -------------------------------------------------------------


def rows_times(x, W):
    """x @ W, with a matrix W (d_in, d_out) shared by every row of x (..., d_in) taken as one
    product of all the rows: NumPy multiplies a stack (..., N, d_in) @ W one N-row matrix at
    a time, each a separate BLAS call whose threads start and stop (40x slower on a busy
    machine); the one product gives the same numbers."""
    if W.ndim != 2 or x.ndim <= 2:
        return x @ W
    return (x.reshape(-1, x.shape[-1]) @ W).reshape(*x.shape[:-1], W.shape[-1])


def linear(x, W, b=None):
    """y = x W (+ b): x (..., N, d_in), W (..., d_in, d_out) -> (..., N, d_out)."""
    y = rows_times(x, W)
    if b is not None:
        y += b
    return y


def weight_grad(x, dy, W):
    """dloss/dW for y = x W: x^T dy, summed over every row W was applied to. x (..., N, d_in)
    and dy (..., N, d_out) may carry more leading axes than W; they fold into N."""
    lead = W.ndim - 2
    x = x.reshape(*x.shape[:lead], -1, x.shape[-1])
    dy = dy.reshape(*dy.shape[:lead], -1, dy.shape[-1])
    return x.swapaxes(-1, -2) @ dy  # (..., d_in, d_out)


def linear_backward(dy, x, W, b=None):
    """(dx, dW, db) for y = linear(x, W, b); db is None without a bias."""
    db = None if b is None else sum_to(dy, np.shape(b))
    return rows_times(dy, W.swapaxes(-1, -2)), weight_grad(x, dy, W), db


# ---- embeddings: e = W_E[t] + W_pos[i] ----------------------------------------------------


def embed(W_E, tokens):
    """x = W_E[t]: W_E (..., V, d) and tokens (..., B, T) -> (..., B, T, d)."""
    lead = W_E.ndim - 2
    seeds = tuple(np.indices(W_E.shape[:lead]).reshape(lead, *W_E.shape[:lead], 1, 1))
    return W_E[(*seeds, tokens)]


def embed_backward(dx, tokens, W_E):
    """dloss/dW_E: the embedding is a product with the tokens' one-hot rows, onehot(t) W_E."""
    onehot = (tokens[..., None] == np.arange(W_E.shape[-2])).astype(dx.dtype)  # (..., B, T, V)
    return weight_grad(onehot, dx, W_E)


def pos_embed(W_pos, tokens):
    """p = W_pos[i] at each position i: W_pos (..., n_ctx, d) -> (..., B, T, d), a view."""
    T, d = tokens.shape[-1], W_pos.shape[-1]
    return np.broadcast_to(W_pos[..., None, :T, :], (*tokens.shape, d))


def pos_embed_backward(dp, W_pos):
    """dloss/dW_pos: each position's row gets the sum over the sequences; rows past T get 0."""
    dW = np.zeros_like(W_pos)
    dW[..., : dp.shape[-2], :] = dp.sum(-3)
    return dW


# ---- LayerNorm: y = (x - mean x) / sqrt(var x + eps) w + b ---------------------------------


def layer_norm(x, w, b, eps=LN_EPS):
    """LayerNorm over the last axis: (y, x_hat, scale), x_hat = (x - mean x) / scale and
    scale = sqrt(var x + eps) (..., 1), TransformerLens's hook_scale."""
    centred = x - x.mean(-1, keepdims=True)
    scale = np.sqrt((centred * centred).mean(-1, keepdims=True) + eps)
    x_hat = centred / scale
    return x_hat * w + b, x_hat, scale


def layer_norm_frozen(x, w, b, scale):
    """LayerNorm with its scale given, not measured: (x - mean x) / scale w + b. With `scale` a
    prompt's own hook_scale this is that prompt's LayerNorm, and linear in x (the replacement
    model's frozen normalisation, Ameisen et al. 2025, "Circuit Tracing", Section 2)."""
    return (x - x.mean(-1, keepdims=True)) / scale * w + b


def layer_norm_backward(dy, x_hat, scale, w):
    """(dx, dw, db): with dx_hat = dy w, dx = (dx_hat - mean dx_hat - x_hat mean(dx_hat x_hat))
    / scale, the two means being the gradient through the mean and the variance."""
    dx_hat = dy * w
    dx = dx_hat - dx_hat.mean(-1, keepdims=True)
    dx -= x_hat * (dx_hat * x_hat).mean(-1, keepdims=True)
    dx /= scale
    return dx, sum_to(dy * x_hat, np.shape(w)), sum_to(dy, np.shape(w))


# ---- RMSNorm: y = x / sqrt(mean x^2 + eps) w (Zhang & Sennrich 2019; Llama) ----------------


def rms_norm(x, w, eps=LN_EPS):
    """RMSNorm over the last axis: (y, x_hat, scale), x_hat = x / scale and scale =
    sqrt(mean x^2 + eps) (..., 1), TransformerLens's hook_scale. No centring, no bias."""
    scale = np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    x_hat = x / scale
    return x_hat * w, x_hat, scale


def rms_norm_frozen(x, w, scale):
    """RMSNorm with its scale given, not measured: x / scale w, linear in x (as
    layer_norm_frozen)."""
    return x / scale * w


def rms_norm_backward(dy, x_hat, scale, w):
    """(dx, dw): with dx_hat = dy w, dx = (dx_hat - x_hat mean(dx_hat x_hat)) / scale, the
    mean being the gradient through the mean square."""
    dx_hat = dy * w
    dx = dx_hat - x_hat * (dx_hat * x_hat).mean(-1, keepdims=True)
    dx /= scale
    return dx, sum_to(dy * x_hat, np.shape(w))


# ---- rotary positions: x_rot = x cos(pos theta) + rotate(x) sin(pos theta) (RoPE) ------------


@lru_cache(maxsize=None)
def rotary_tables(T: int, rotary_dim: int, base: float, adjacent: bool = False):
    """(cos, sin), each (T, rotary_dim), read-only: the angles of RoPE (Su et al. 2021,
    "RoFormer"), pos / base^(2i / rotary_dim) for the pair i at position pos. The pairs are
    the two halves (dims i and i + rotary_dim / 2: GPT-NeoX, Llama, Pythia) or, with
    `adjacent`, neighbours (2i and 2i + 1: GPT-J)."""
    inv_freq = 1.0 / base ** (np.arange(0, rotary_dim, 2) / rotary_dim)  # (r/2,)
    angles = np.arange(T)[:, None] * inv_freq  # (T, r/2)
    angles = np.repeat(angles, 2, -1) if adjacent else np.concatenate([angles, angles], -1)
    cos, sin = np.cos(angles), np.sin(angles)
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


def rotate(x, adjacent: bool = False):
    """The quarter turn of each pair: halves (x1, x2) -> (-x2, x1), or with `adjacent` each
    neighbour pair (x_2i, x_2i+1) -> (-x_2i+1, x_2i). Its transpose is its negative."""
    if adjacent:
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = -x[..., 1::2], x[..., 0::2]
        return out
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], -1)


def rotary(x, cos, sin, adjacent: bool = False):
    """x with its first r = cos.shape[-1] dimensions turned by position: x cos + rotate(x) sin;
    the rest pass (Pythia's partial rotary). cos and sin broadcast against x[..., :r]."""
    r = cos.shape[-1]
    head = x[..., :r]
    turned = head * cos + rotate(head, adjacent) * sin
    return turned if r == x.shape[-1] else np.concatenate([turned, x[..., r:]], -1)


def rotary_backward(dy, cos, sin, adjacent: bool = False):
    """dloss/dx for y = rotary(x): dy cos - rotate(dy sin), rotate's transpose being minus
    itself; the passed dimensions' gradient is dy's."""
    r = cos.shape[-1]
    head = dy[..., :r]
    dx = head * cos - rotate(head * sin, adjacent)
    return dx if r == dy.shape[-1] else np.concatenate([dx, dy[..., r:]], -1)


def repeat_kv(x, group: int):
    """Grouped-query attention's keys or values for every query head: each of the n_kv heads
    (axis -3) repeated `group` times in place (head h reads kv head h // group)."""
    return x if group == 1 else np.repeat(x, group, axis=-3)


def repeat_kv_backward(dx, group: int):
    """The gradient of each kv head: the sum over the query heads of its group."""
    if group == 1:
        return dx
    *lead, H, T, dh = dx.shape
    return dx.reshape(*lead, H // group, group, T, dh).sum(-3)


# ---- attention: z = softmax(q k^T / sqrt(dh) + mask) v -------------------------------------


def softmax(x):
    """The softmax over the last axis (-inf entries give 0); the maximum is taken out first so
    that no exponential overflows."""
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def softmax_backward(dpattern, pattern, divisor: float):
    """dloss/dscores for pattern = softmax(scores / divisor): pattern (dpattern - sum(dpattern
    pattern)) / divisor per row (0 where the pattern is 0)."""
    return (dpattern - (dpattern * pattern).sum(-1, keepdims=True)) * pattern / divisor


@lru_cache(maxsize=None)
def causal_mask(T: int) -> np.ndarray:
    """(T, T) bool: True where a query may read a key (key <= query)."""
    return np.tril(np.ones((T, T), dtype=bool))


@lru_cache(maxsize=None)
def causal_bias(T: int, dtype=np.float64) -> np.ndarray:
    """Added to attention scores: 0 where a query may read a key, -inf where not (T, T)."""
    bias = np.where(causal_mask(T), 0.0, -np.inf).astype(dtype)
    bias.flags.writeable = False
    return bias


@lru_cache(maxsize=None)
def local_bias(T: int, window: int, dtype=np.float64) -> np.ndarray:
    """Causal and local (GPT-Neo's local layers): a query reads the `window` latest keys, its
    own included (query - key < window); 0 there, -inf elsewhere (T, T)."""
    distance = np.arange(T)[:, None] - np.arange(T)[None, :]
    bias = np.where((distance >= 0) & (distance < window), 0.0, -np.inf).astype(dtype)
    bias.flags.writeable = False
    return bias


def attention(q, k, v, bias, hook=no_hook, kit=None, coeff: float = 1.0):
    """Each head's attention, heads on a leading axis: z = softmax(q k^T / sqrt(dh) + bias) v.
    q (..., Tq, dh), k and v (..., Tk, dh), bias (..., Tq, Tk) 0 or -inf. Returns z (..., Tq,
    dh) and the pattern (..., Tq, Tk).

    `coeff` below 1 is the attention rate of Zhong et al. 2023 ("The Clock and the Pizza",
    their `attn_coeff`): the pattern is coeff softmax(...) + (1 - coeff) on every key the query
    may read (bias 0), as their code adds 1 - coeff to every entry of its unmasked pattern. The
    rows then sum to coeff + (1 - coeff) Tk', not 1: at coeff 0 a query sums the values it
    reads. hook_pattern is this mixed pattern, the weights the values are multiplied by."""
    kit = kit or REFERENCE
    scores = hook("hook_attn_scores", q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1]) + bias)
    # masked again, should a hook have unmasked the scores
    pattern = kit.softmax(scores + bias)
    if coeff != 1.0:
        pattern = coeff * pattern + (1.0 - coeff) * visible(bias, pattern.dtype)
    pattern = hook("hook_pattern", pattern)
    return pattern @ v, pattern


def visible(bias, dtype) -> np.ndarray:
    """1 where attention's bias lets a query read a key (0), 0 where it hides it (-inf)."""
    return (np.asarray(bias) == 0).astype(dtype)


def attention_backward(dz, q, k, v, pattern, kit=None, coeff: float = 1.0, bias=None):
    """(dq, dk, dv) from dloss/dz, given attention's inputs and its pattern (with `coeff`
    below 1 the mixed pattern, and the `bias` it was mixed under: the softmax is recovered
    from it, and the scores' gradient is the softmax's scaled by coeff)."""
    kit = kit or REFERENCE
    dv = pattern.swapaxes(-1, -2) @ dz
    dpattern = dz @ v.swapaxes(-1, -2)
    if coeff != 1.0:
        if coeff == 0.0:  # the scores change nothing
            zeros = np.zeros_like(dpattern)
            return zeros @ k, zeros.swapaxes(-1, -2) @ q, dv
        # softmax = (pattern - (1 - coeff) visible) / coeff; its error ~eps / coeff is
        # multiplied back by coeff in dpattern, so the gradient stays exact to ~eps
        pattern = (pattern - (1.0 - coeff) * visible(bias, pattern.dtype)) / coeff
        dpattern = coeff * dpattern
    dscores = kit.softmax_backward(dpattern, pattern, math.sqrt(q.shape[-1]))
    return dscores @ k, dscores.swapaxes(-1, -2) @ q, dv


# ---- the MLP: out = act(x W_in + b_in) W_out + b_out ---------------------------------------


def gelu(pre):
    """GPT-2's tanh GELU, 0.5 x (1 + t) with t = tanh(c (x + 0.044715 x^3)): (post, t), t kept
    for the derivative."""
    # x * x * x, as the kernels write it: NumPy's x**3 calls pow() an element (~40x slower)
    t = np.tanh(GELU_C * (pre + 0.044715 * (pre * pre * pre)))
    return 0.5 * pre * (1 + t), t


def gelu_backward(dpost, pre, t):
    """dpost d gelu / d pre = dpost 0.5 (1 + t) (1 + x (1 - t) c (1 + 3 * 0.044715 x^2)), from
    0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2) with 1 - t^2 = (1 - t)(1 + t)."""
    return dpost * 0.5 * (1 + t) * (1 + pre * (1 - t) * GELU_C * (1 + 3 * 0.044715 * pre**2))


def erf(x):
    """The error function, elementwise, in float64 (then the input's float dtype): SciPy's,
    vectorised, within 1e-15 of the C library's (Python's math.erf; tested), which it
    replaced: one Python call an entry made the exact GELU most of a forward pass."""
    from scipy import special  # on first use: most models never need it

    x = np.asarray(x)
    out = special.erf(x.astype(np.float64, copy=False))
    return out.astype(x.dtype if x.dtype.kind == "f" else np.float64, copy=False)


def gelu_erf(pre):
    """The exact GELU, x (1 + erf(x / sqrt 2)) / 2 (PyTorch's nn.GELU())."""
    return 0.5 * pre * (1.0 + erf(pre * (1.0 / math.sqrt(2.0))))


def gelu_erf_grad(pre):
    """d gelu_erf / d pre = Phi(x) + x phi(x), with Phi, phi the normal cdf and density."""
    pdf = np.exp(-0.5 * pre * pre) * (1.0 / math.sqrt(2.0 * math.pi))
    return 0.5 * (1.0 + erf(pre * (1.0 / math.sqrt(2.0)))) + pre * pdf


def silu(pre):
    """SiLU (swish), x sigmoid(x) (Llama's SwiGLU): (post, sigmoid), the sigmoid written as
    exp(-log(1 + exp(-x))), which overflows nowhere and keeps its tail's digits."""
    sig = np.exp(-np.logaddexp(0.0, -pre))
    return pre * sig, sig


def silu_backward(dpost, pre, sig):
    """dpost d silu / d pre = dpost sig (1 + x (1 - sig))."""
    return dpost * sig * (1.0 + pre * (1.0 - sig))


def activation(act_fn: str, pre, kit=None):
    """(post, saved): the MLP's nonlinearity (relu, gelu: tanh's, gelu_erf: the exact one,
    silu) and what its backward pass reuses."""
    if act_fn == "relu":
        return np.maximum(pre, 0.0), None
    if act_fn == "silu":
        return silu(pre)
    if act_fn == "gelu_erf":
        return gelu_erf(pre), None
    return (kit or REFERENCE).gelu(pre)


def activation_backward(act_fn: str, dpost, pre, saved, kit=None):
    """dloss/dpre from dloss/dpost (the kit's GELU may write over dpost)."""
    if act_fn == "relu":
        return dpost * (pre > 0)
    if act_fn == "silu":
        return silu_backward(dpost, pre, saved)
    if act_fn == "gelu_erf":
        return dpost * gelu_erf_grad(pre)
    return (kit or REFERENCE).gelu_backward(dpost, pre, saved)


def mlp(x, W_in, b_in, W_out, b_out, act_fn: str, hook=no_hook, kit=None):
    """out = act(x W_in + b_in) W_out + b_out: x (..., N, d) -> out (..., N, d), and what
    mlp_backward needs: (pre, post, saved) (..., N, m)."""
    pre = hook("hook_pre", linear(x, W_in, b_in))
    post, saved = activation(act_fn, pre, kit)
    post = hook("hook_post", post)
    return linear(post, W_out, b_out), (pre, post, saved)


def mlp_backward(dout, x, W_in, b_in, W_out, b_out, act_fn: str, saved, kit=None):
    """dloss/dx and the weights' gradients (dW_in, db_in, dW_out, db_out), given mlp's
    inputs and its saved (pre, post, saved)."""
    pre, post, act_saved = saved
    dpost, dW_out, db_out = linear_backward(dout, post, W_out, b_out)
    dpre = activation_backward(act_fn, dpost, pre, act_saved, kit)
    dx, dW_in, db_in = linear_backward(dpre, x, W_in, b_in)
    return dx, (dW_in, db_in, dW_out, db_out)


def solu(pre):
    """SoLU (Elhage et al. 2022, "Softmax Linear Units"): x softmax(x) over the neurons; (mid,
    the softmax)."""
    s = softmax(pre)
    return pre * s, s


def solu_backward(dmid, pre, s):
    """dloss/dpre for mid = x softmax(x): s (dmid (1 + x) - sum(dmid x s))."""
    g = dmid * pre
    return s * (dmid + g - (g * s).sum(-1, keepdims=True))


def solu_mlp(x, W_in, b_in, ln_w, ln_b, W_out, b_out, eps=LN_EPS, hook=no_hook):
    """The SoLU MLP as TransformerLens writes it (act_fn "solu_ln"): pre = x W_in + b_in
    (hook_pre), mid = solu(pre) (hook_mid), post = LayerNorm(mid) over the neurons with its
    own gain and bias (ln.hook_scale, ln.hook_normalized, hook_post), out = post W_out + b_out.
    Returns out and what solu_mlp_backward needs."""
    pre = hook("hook_pre", linear(x, W_in, b_in))
    mid, s = solu(pre)
    mid = hook("hook_mid", mid)
    post, x_hat, scale = layer_norm(mid, ln_w, ln_b, eps)
    hook("ln.hook_scale", scale)
    post = hook("hook_post", hook("ln.hook_normalized", post))
    return linear(post, W_out, b_out), (pre, s, x_hat, scale, post)


def solu_mlp_backward(dout, x, W_in, b_in, ln_w, ln_b, W_out, b_out, saved):
    """dloss/dx and the weights' gradients (dW_in, db_in, dln_w, dln_b, dW_out, db_out)."""
    pre, s, x_hat, scale, post = saved
    dpost, dW_out, db_out = linear_backward(dout, post, W_out, b_out)
    dmid, dln_w, dln_b = layer_norm_backward(dpost, x_hat, scale, ln_w)
    dx, dW_in, db_in = linear_backward(solu_backward(dmid, pre, s), x, W_in, b_in)
    return dx, (dW_in, db_in, dln_w, dln_b, dW_out, db_out)


def gated_mlp(x, W_gate, W_in, b_in, W_out, b_out, act_fn: str, hook=no_hook, kit=None):
    """The gated MLP (Shazeer 2020, "GLU Variants Improve Transformer"; SwiGLU with silu,
    GeGLU with gelu), as TransformerLens writes it: out = (act(x W_gate) * (x W_in) + b_in)
    W_out + b_out, hooks hook_pre (x W_gate), hook_pre_linear (x W_in) and hook_post. Returns
    out and what gated_mlp_backward needs."""
    pre = hook("hook_pre", linear(x, W_gate))
    pre_linear = hook("hook_pre_linear", linear(x, W_in))
    act, act_saved = activation(act_fn, pre, kit)
    post = hook("hook_post", act * pre_linear + b_in)
    return linear(post, W_out, b_out), (pre, pre_linear, post, act, act_saved)


def gated_mlp_backward(dout, x, W_gate, W_in, b_in, W_out, b_out, act_fn: str, saved, kit=None):
    """dloss/dx and the weights' gradients (dW_gate, dW_in, db_in, dW_out, db_out), given
    gated_mlp's inputs and what it saved."""
    pre, pre_linear, post, act, act_saved = saved
    dpost, dW_out, db_out = linear_backward(dout, post, W_out, b_out)
    db_in = sum_to(dpost, np.shape(b_in))
    dpre = activation_backward(act_fn, dpost * pre_linear, pre, act_saved, kit)
    dx_gate, dW_gate, _ = linear_backward(dpre, x, W_gate)
    dx, dW_in, _ = linear_backward(dpost * act, x, W_in)
    dx += dx_gate
    return dx, (dW_gate, dW_in, db_in, dW_out, db_out)


# ---- the elementwise steps, swappable --------------------------------------------------------


@dataclass(frozen=True)
class Kit:
    """The elementwise steps the components call, with this module's signatures: the
    reference's (REFERENCE) or the engine's compiled float32 ones (fused.KIT)."""

    layer_norm: Callable
    layer_norm_backward: Callable
    softmax: Callable
    softmax_backward: Callable
    gelu: Callable
    gelu_backward: Callable


REFERENCE = Kit(layer_norm, layer_norm_backward, softmax, softmax_backward, gelu, gelu_backward)
